// seqpipe: run the pipeline on this machine and talk to it. One CLI11 subcommand per command
// (up, send, status, models, keygen); `seqpipe [COMMAND] --help` is CLI11's help from the flags
// registered here, send's generation options from the option table.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "seqpipe/child_processes.h"
#include "seqpipe/cli/cli.h"
#include "seqpipe/cli/generate_flags.h"
#include "seqpipe/client.h"
#include "seqpipe/config/config.h"
#include "seqpipe/models_command.h"
#include "seqpipe/observability/status.h"
#include "seqpipe/runtime/service.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/security/security.h"
#include "seqpipe/status_command.h"
#include "seqpipe/supervisor.h"
#include "seqpipe/transport/file_lock.h"
#include "seqpipe/transport/transport.h"
#include "seqpipe/up_command.h"

namespace {

namespace cli = seqpipe::cli;
namespace config = seqpipe::config;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// How long `send` waits for a connection to the gateway before it says none listens.
constexpr int64_t kConnectWaitMs = 1000;

// What each command does, beyond its flags (CLI11 lists those, with their help): the footers of
// `seqpipe COMMAND --help`.
constexpr const char* kSendFooter =
    R"(Sends one request to the gateway (every gateway replica's client endpoint of the config, or
--endpoint: one or several, comma-separated; the request goes again, with its id, to the next
gateway when one dies or does not answer within 5 s; with no reply a second past the request's
deadline, --timeout-ms or gateway.default_timeout_ms, it says to start `seqpipe up`) and prints
the text(s), the score(s) with --scores, the per-stage timings, and each text's tokens and why
it ended (`tokens: prompt 5, completion 3 (length)`). --model and --version pick one of a model
repository's models (`not_found` when it serves no such model or version). The generation
options are HF generate()'s, the request's params (docs/PROTOCOL.md, "Generation options"; the
server checks their ranges); with --num-return-sequences N it prints N hypotheses per text, best
first, each with its score.
With security.server_key in the config, it is a CurveZMQ client with security.client_key's key
pair (docs/DEPLOY.md, "Keys").
Exit status: 0 ok, 1 the pipeline answered an error or did not answer, 2 bad usage or config.)";

constexpr const char* kStatusFooter =
    R"(Asks the two hubs (gateway, batcher) of the running pipeline what they serve and see: the
models they serve and their bound ports (HTTP, gRPC, /metrics), the compute type and device the
engine stages run with (as the batcher was configured: the same config and --set as they); for
each stage its live replicas (announced, so warmed up), the work its replicas hold (in flight),
the work waiting in the hub (queued) and the free credits ("-" for the hubs, which grant credits
and hold none); then each hub's uptime, the gateway's requests, its server errors (and their
rate) apart from its clients' (invalid_argument, too_long, not_found, cancelled), the replicas
each stage lost (a restart is one), and "ready: yes" when every stage has a live replica. For a
hub that does not answer, it prints what the local config would start instead, said as such.
--wait N asks again until ready, up to N seconds (`seqpipe up &` then `seqpipe status --wait
120`). With security.server_key in the config, it is a CurveZMQ client.
Exit status: 0 ready, 1 not ready or a hub did not answer within 1 s (reported as down), 2 bad
usage or config.)";

constexpr const char* kKeygenFooter =
    R"(Writes a CurveZMQ key pair per NAME into DIR: DIR/NAME, the public key (give it to the hubs'
allow lists, or to the clients of a hub), and DIR/NAME_secret, both keys, mode 0600 (czmq's
certificate format; docs/DEPLOY.md). It never overwrites a file.
Exit status: 0 written, 1 a file could not be written, 2 bad usage.)";

// A reply as `seqpipe send` prints it: the texts (unless they went out streamed), scores,
// hypotheses, then the per-stage timings and each text's usage. 1 for an error reply.
int print_reply(const seqpipe::protocol::Reply& reply, bool streamed) {
  if (!reply.ok) {
    std::fprintf(stderr, "seqpipe send: error %s: %s\n",
                 std::string(seqpipe::protocol::wire_name(reply.error->code)).c_str(),
                 reply.error->message.c_str());
    return 1;
  }
  for (size_t i = 0; i < reply.texts.size(); ++i) {
    if (!streamed) std::printf("%s", reply.texts[i].c_str());
    if (reply.scores && i < reply.scores->size()) std::printf("\t(score %.4f)", (*reply.scores)[i]);
    std::printf("\n");
    if (!reply.sequences || i >= reply.sequences->size()) continue;
    for (size_t k = 0; k < (*reply.sequences)[i].size(); ++k) {
      const auto& h = (*reply.sequences)[i][k];
      std::printf("  %zu: %s\t(score %.4f)\n", k + 1, h.text.c_str(), h.score);
    }
  }
  const auto& t = reply.timings;
  std::printf(
      "timings (us): queue %llu, tokenize %llu, batch_wait %llu, encode %llu, decode %llu, "
      "postprocess %llu, total %llu\n",
      (unsigned long long)t.queue_us, (unsigned long long)t.tokenize_us,
      (unsigned long long)t.batch_wait_us, (unsigned long long)t.encode_us,
      (unsigned long long)t.decode_us, (unsigned long long)t.postprocess_us,
      (unsigned long long)t.total_us);
  for (const auto& u : reply.usage) {
    std::printf("tokens: prompt %u, completion %u (%s)\n", u.prompt_tokens, u.completion_tokens,
                std::string(seqpipe::protocol::wire_name(u.finish_reason)).c_str());
  }
  return 0;
}

// `seqpipe send`'s command line.
struct SendArgs {
  seqpipe::service::ServiceFlags flags;
  int wait_s = 0;  // --wait: up to this many seconds for the pipeline to be ready
  std::string endpoint;
  seqpipe::protocol::Request request;
  std::optional<uint32_t> cancel_after_ms;
};

CLI::App* add_send(CLI::App& app, SendArgs& a) {
  CLI::App* send = app.add_subcommand("send", "send one request to the gateway, print the reply");
  seqpipe::service::add_service_flags(*send, a.flags, false);
  send->add_option("--endpoint", a.endpoint,
                   "the gateway's client endpoint(s), comma-separated (default: the config's)")
      ->type_name("EP");
  cli::add_number(*send, "--wait", a.wait_s)
      ->description(
          "first wait up to N seconds for the pipeline to be ready (as `seqpipe status` asks: "
          "after `seqpipe up &`); not ready by then: exit status 1");
  cli::add_number(*send, "--timeout-ms", a.request.timeout_ms)
      ->description("the request's deadline (default: gateway.default_timeout_ms)");
  cli::add_number(*send, "--cancel-after-ms", a.cancel_after_ms)
      ->description(
          "cancel the request if no reply came within N ms, and print the reply that follows: "
          "`error cancelled`, or the result when it finished first");
  send->add_option_function<std::string>(
          "--model", [&a](const std::string& name) { a.request.model = name; },
          "the model to run, by its name in the server's repository (default: the server's "
          "default model)")
      ->type_name("NAME");
  cli::add_number(*send, "--version", a.request.version)
      ->description("the model's version to run (default: its highest)");
  send->add_flag("--stream", a.request.stream,
                 "print the text as it is decoded, word by word (one TEXT, greedy search; "
                 "docs/PROTOCOL.md, \"Streaming\")");
  cli::add_generate_options(*send, a.request.params);
  send->add_option("TEXT", a.request.texts, "the text(s) to send; several make a texts[] request");
  send->footer(kSendFooter);
  return send;
}

int send(SendArgs a) {
  seqpipe::protocol::Request& request = a.request;
  std::string& endpoint = a.endpoint;
  const std::optional<uint32_t> cancel_after_ms = a.cancel_after_ms;
  const seqpipe::service::ServiceArgs args = seqpipe::service::checked_service_args(a.flags);
  if (request.texts.empty()) throw cli::UsageError("give the text to send");
  if (request.stream && cancel_after_ms)
    throw cli::UsageError("--stream and --cancel-after-ms do not go together");
  request.batch_form = request.texts.size() > 1;
  const config::PipelineConfig c =
      config::load_pipeline_config(args.config_path, args.overrides).config;
  if (endpoint.empty()) endpoint = config::client_endpoints(c);
  if (a.wait_s > 0) {
    zmq::context_t context(1);
    const auto status = seqpipe::supervisor::ask_until_ready(context, c, a.wait_s);
    if (!status.ready()) {
      std::fprintf(stderr, "seqpipe send: the pipeline is not ready after %d s: no live %s\n",
                   a.wait_s, seqpipe::supervisor::missing_text(status).c_str());
      return 1;
    }
  }

  seqpipe::client::Client client(endpoint, {.curve = seqpipe::security::client_keys(c.security)});
  // The gateway answers every request by its deadline (deadline_exceeded at worst), so a second
  // past it with nothing back means no gateway is there: say so then, not after a long wait.
  const uint32_t deadline_ms = request.timeout_ms.value_or(c.gateway.default_timeout_ms);
  const auto wait = std::chrono::milliseconds(deadline_ms + 1000);
  // Nothing listening is said at once, not after the whole deadline (10 s by default).
  const auto connect_wait = std::min(wait, std::chrono::milliseconds(kConnectWaitMs));
  if (!client.connected(connect_wait)) {
    std::fprintf(stderr,
                 "seqpipe send: no connection to %s within %lld ms: is the pipeline running? "
                 "Start it with `seqpipe up` (with the same --config and --set), or give its "
                 "gateway with --endpoint\n",
                 endpoint.c_str(), static_cast<long long>(connect_wait.count()));
    return 1;
  }
  std::variant<seqpipe::protocol::Reply, seqpipe::protocol::Error> result;
  bool streamed = false;  // the text went out in pieces as it came
  if (request.stream) {
    const auto id = client.submit(request);
    result = seqpipe::protocol::Error{seqpipe::protocol::ErrorCode::kUnavailable,
                                      "could not send the request"};
    while (id) {
      result = client.receive(*id, wait);
      const auto* partial = std::get_if<seqpipe::protocol::Reply>(&result);
      if (!partial || !partial->partial) break;
      std::fputs(partial->texts.at(0).c_str(), stdout);
      std::fflush(stdout);
      streamed = true;
    }
  } else if (!cancel_after_ms) {
    result = client.call(request, wait);
  } else if (const auto id = client.submit(request); !id) {
    result = seqpipe::protocol::Error{seqpipe::protocol::ErrorCode::kUnavailable,
                                      "could not send the request"};
  } else {
    result = client.receive(*id, std::chrono::milliseconds(*cancel_after_ms));
    if (auto* e = std::get_if<seqpipe::protocol::Error>(&result);
        e && e->code == seqpipe::protocol::ErrorCode::kUnavailable) {
      client.cancel(*id);  // no reply yet
      result = client.receive(*id, wait);
    }
  }
  if (auto* e = std::get_if<seqpipe::protocol::Error>(&result)) {
    if (e->code == seqpipe::protocol::ErrorCode::kUnavailable) {
      std::fprintf(stderr,
                   "seqpipe send: no reply from %s within %lld ms: is the pipeline running? Start "
                   "it with `seqpipe up` (with the same --config and --set), or give its gateway "
                   "with --endpoint\n",
                   endpoint.c_str(), static_cast<long long>(wait.count()));
    } else {
      std::fprintf(stderr, "seqpipe send: %s (%s)\n", e->message.c_str(), endpoint.c_str());
    }
    return 1;
  }
  return print_reply(std::get<seqpipe::protocol::Reply>(result), streamed);
}

}  // namespace

int keygen(const std::string& dir, const std::vector<std::string>& names) {
  if (names.empty()) throw cli::UsageError("give the name of each key pair to write");
  std::error_code ec;
  fs::create_directories(dir, ec);  // "cannot write DIR/NAME_secret" would not say why
  if (ec) throw std::runtime_error(dir + ": cannot create the directory: " + ec.message());
  for (const std::string& name : names) {
    if (name.empty() || name.find('/') != std::string::npos)
      throw cli::UsageError("a key name is a file name, got '" + name + "'");
    const std::string path = (fs::path(dir) / name).string();
    seqpipe::security::write_key_files(path, seqpipe::security::generate_key_pair());
    std::printf("%s (public), %s_secret (secret, mode 0600)\n", path.c_str(), path.c_str());
  }
  return 0;
}

// Every command's arguments, filled by parse.
struct Commands {
  seqpipe::supervisor::UpArgs up;
  seqpipe::service::ServiceFlags status;
  int status_wait_s = 0;  // seqpipe status --wait
  SendArgs send;
  seqpipe::supervisor::ModelsArgs models;
  std::string keygen_dir = ".";
  std::vector<std::string> keygen_names;
};

// The command line: one CLI11 subcommand per command, each with its flags' help and a footer.
void add_commands(CLI::App& app, Commands& c) {
  cli::set_up(app);  // seqpipe's wording and TakeLast, which the subcommands inherit
  app.set_help_flag("-h,--help", "print this help and exit");
  app.require_subcommand(0, 1);
  seqpipe::supervisor::add_up_command(app, c.up);
  add_send(app, c.send);
  CLI::App* status = app.add_subcommand("status", "ask the hubs how the pipeline is doing");
  seqpipe::service::add_service_flags(*status, c.status, false);
  cli::add_number(*status, "--wait", c.status_wait_s)
      ->description("ask again until the pipeline is ready, for up to N seconds (default 0: once)");
  status->footer(kStatusFooter);
  seqpipe::supervisor::add_models_command(app, c.models);
  CLI::App* keygen = app.add_subcommand("keygen", "write CurveZMQ key pairs");
  keygen->add_option("--dir", c.keygen_dir, "where to write them (made if missing)")
      ->type_name("DIR")
      ->capture_default_str();
  keygen->add_option("NAME", c.keygen_names, "the name of each key pair");
  keygen->footer(kKeygenFooter);
  app.footer(
      "seqpipe COMMAND --help says more. Exit status: 0 ok, 1 the command failed, 2 bad usage or "
      "config.");
}

// The chosen command, run; 2 (with the help on stderr) when none was named.
int run(CLI::App& app, Commands& c, const std::vector<std::string>& rest) {
  const auto chosen = app.get_subcommands();
  if (chosen.empty()) {
    if (!rest.empty()) throw cli::UsageError("unknown command '" + rest.front() + "'");
    std::cerr << app.help();
    return 2;
  }
  if (!rest.empty()) throw cli::UsageError("unknown argument '" + rest.front() + "'");
  const std::string name = chosen.front()->get_name();
  if (name == "up") return seqpipe::supervisor::up_command(std::move(c.up));
  if (name == "send") return send(std::move(c.send));
  if (name == "models") return seqpipe::supervisor::models_command(std::move(c.models));
  if (name == "status")
    return seqpipe::supervisor::status_command(
        seqpipe::service::checked_service_args(std::move(c.status)), c.status_wait_s);
  return keygen(c.keygen_dir, c.keygen_names);
}

int main(int argc, char** argv) {
  CLI::App app("seqpipe: run the pipeline on this machine and talk to it", "seqpipe");
  Commands commands;
  add_commands(app, commands);
  try {
    std::vector<std::string> rest;
    try {
      rest = cli::parse(app, argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::cout << app.help();  // the chosen command's, when one was named
      return 0;
    }
    return run(app, commands, rest);
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "seqpipe: %s (see seqpipe --help)\n", e.what());
    return 2;
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "seqpipe: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seqpipe: %s\n", e.what());
    return 1;
  }
}
