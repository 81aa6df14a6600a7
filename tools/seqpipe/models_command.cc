#include "seqpipe/models_command.h"

#include <cstdio>

#include "seqpipe/config/config.h"
#include "seqpipe/runtime/model_control.h"

namespace seqpipe::supervisor {
namespace {

constexpr const char* kModelsFooter =
    R"(Asks `seqpipe up --repository DIR` (the one with the same --config and --set, by its runtime
dir's control socket) to list, load or unload the repository's model versions:
  list            every version in DIR or served, with its state (READY, LOADING, UNLOADING,
                  UNAVAILABLE) and why it is unavailable ("not loaded", "unloaded", a replica's
                  exit, a bad entry's path and reason)
  load NAME       serves NAME's highest version in DIR (or --version V): starts its replicas,
                  routes to it once every stage has a warm replica, then unloads NAME's other
                  versions (a reload: no request is dropped); it answers when all that is done
  unload NAME     stops routing to NAME (or only --version V), waits for its requests in flight,
                  then stops its replicas
Exit status: 0 done, 1 refused (the reason is printed) or no answer, 2 bad usage or config.)";

void print_index(const model_control::ControlReply& reply) {
  std::printf("%-24s %8s %-12s %s\n", "model", "version", "state", "reason");
  for (const auto& m : reply.models) {
    std::printf("%-24s %8s %-12s %s\n", m.name.c_str(),
                m.version > 0 ? std::to_string(m.version).c_str() : "-",
                std::string(model_control::state_name(m.state)).c_str(), m.reason.c_str());
  }
  if (reply.more > 0)
    std::printf("(%zu more not shown: an answer holds at most %zu)\n", reply.more,
                model_control::kMaxIndexEntries);
}

}  // namespace

CLI::App* add_models_command(CLI::App& app, ModelsArgs& a) {
  CLI::App* models = app.add_subcommand("models", "list, load or unload a repository's models");
  service::add_service_flags(*models, a.flags, false);
  models->add_option("ACTION", a.action, "list, load or unload")->required();
  models->add_option("NAME", a.name, "the model to load or unload");
  cli::add_number(*models, "--version", a.version)
      ->description("that version only (load: instead of the highest)");
  models->footer(kModelsFooter);
  return models;
}

int models_command(ModelsArgs a) {
  const service::ServiceArgs args = service::checked_service_args(std::move(a.flags));
  model_control::ControlRequest request;
  if (a.action == "list") {
    request.op = model_control::Op::kIndex;
  } else if (a.action == "load" || a.action == "unload") {
    request.op = a.action == "load" ? model_control::Op::kLoad : model_control::Op::kUnload;
    if (a.name.empty()) throw cli::UsageError("models " + a.action + " needs the model's NAME");
    if (!config::valid_model_name(a.name))
      throw cli::UsageError("'" + a.name + "' is not a model name");
  } else {
    throw cli::UsageError("models: unknown action '" + a.action + "' (list, load, unload)");
  }
  request.name = a.name;
  request.version = a.version;
  const config::PipelineConfig c =
      config::load_pipeline_config(args.config_path, args.overrides).config;
  zmq::context_t context(1);
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
      request.op == model_control::Op::kIndex ? std::chrono::seconds(5)
                                              : model_control::kAnswerWait);
  const auto reply =
      model_control::ask_supervisor(context, config::control_endpoint(c), request, wait);
  if (reply.error) {
    std::fprintf(stderr, "seqpipe models: %s: %s\n",
                 std::string(protocol::wire_name(reply.error->code)).c_str(),
                 reply.error->message.c_str());
    return 1;
  }
  print_index(reply);
  return 0;
}

}  // namespace seqpipe::supervisor
