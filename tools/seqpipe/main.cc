// seqpipe: run the pipeline on this machine and talk to it.
//   seqpipe up   [--config FILE] [--set key=value ...]   start every stage as child processes
//   seqpipe send [options] TEXT [TEXT ...]               one request to the gateway, print the
//   answer
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
#include "seqpipe/client.h"
#include "seqpipe/config/config.h"
#include "seqpipe/observability/status.h"
#include "seqpipe/runtime/service.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/security/security.h"
#include "seqpipe/supervisor.h"
#include "seqpipe/transport/file_lock.h"
#include "seqpipe/transport/transport.h"

namespace {

namespace cli = seqpipe::cli;
namespace config = seqpipe::config;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kUsage =
    R"(usage: seqpipe up   [--config FILE] [--set key=value ...] [--repository DIR] [--print-config]
       seqpipe send [--config FILE] [--set key=value ...] [--endpoint EP] [--num-beams N]
                    [--max-new-tokens N] [--min-new-tokens N] [--timeout-ms N] [--scores]
                    [--priority N] [--cancel-after-ms N] [--num-return-sequences N]
                    [--do-sample] [--temperature X] [--top-k N] [--top-p X] [--seed N]
                    [--repetition-penalty X] [--no-repeat-ngram-size N] [--stop TEXT ...]
                    [--stream] TEXT [TEXT ...]
       seqpipe status [--config FILE] [--set key=value ...]
       seqpipe keygen [--dir DIR] NAME [NAME ...]

up     starts the whole pipeline on this machine as child processes: gateway.replicas gateways and
       batcher.replicas batchers (default 1 each; replica k on the endpoints and ports k after the
       configured ones), and `replicas` copies of the tokenizer, encoder, decoder and
       postprocessor (config/pipeline.yaml, docs/CONFIG.md; 0, the default, sizes them and the
       encoders' and decoders' threads from the cores and the model, and OMP_WAIT_POLICY=passive
       is set when those threads outnumber the cores: docs/CONFIG.md, "Sizing"), every one with
       the same --config and --set arguments. It prints the sizing, the client
       endpoint and the metrics ports, restarts a child that dies (after 0.5 s, doubling while it
       keeps failing), and stops everything on Ctrl-C or SIGTERM. It checks the config and the
       model directory before starting anything, and stops with the error (exit status 1) when a
       child exits with status 2 (bad usage or config, or an address in use) or exits 5 times in
       a row within 5 s of its start. Its children die with it, even when it is killed. It prints
       the config files in force: the model directory's seqpipe.yaml (the model's own settings),
       then the config file, then --set (docs/CONFIG.md, "The model's settings"). With
       --print-config it prints the config in force instead (every key, limits included, as
       YAML) and starts nothing. --repository DIR (model.repository) serves a model repository:
       DIR/<name>/<version>/ (a model directory directly in DIR is version 1); the worker stages'
       replicas are started for every model version in it, and a request names its model
       (`model`, `version`); entries that cannot be served are printed and left out.
send   sends one request to the gateway (every gateway replica's client endpoint of the config, or
       --endpoint: one or several, comma-separated; the request goes again, with its id, to the next gateway when
       one dies or does not answer within 5 s; with no reply a second past the request's
       deadline, --timeout-ms or gateway.default_timeout_ms, it says to start `seqpipe up`) and
       prints the text(s), the score(s) with --scores, the per-stage timings, and each text's
       tokens and why it ended (`tokens: prompt 5, completion 3 (length)`). --priority N:
       1 (highest) .. batcher.priority_levels (default: batcher.default_priority_level). With
       --cancel-after-ms N it cancels the request if no reply came within N ms, and prints the
       reply that follows: `error cancelled`, or the result when it finished first. The
       generation options are HF generate()'s (docs/PROTOCOL.md): --do-sample draws each token
       (--temperature, --top-k, --top-p; --seed N gives the same text every time),
       --repetition-penalty and --no-repeat-ngram-size steer any search, --stop TEXT (repeatable)
       cuts the text before it, --num-return-sequences N (<= --num-beams) prints N hypotheses
       per text, best first, each with its score. --stream (one TEXT, greedy search) prints
       the text as it is decoded, word by word (docs/PROTOCOL.md, "Streaming").
       With security.server_key in the config, send and status are CurveZMQ clients with
       security.client_key's key pair (docs/DEPLOY.md, "Keys").
status prints the model, its compute type and the endpoints the config names, then asks the two
       hubs (gateway, batcher) what they see: for each stage its live replicas (announced, so
       warmed up), the work its replicas hold (in flight), the work waiting in the hub (queued)
       and the free credits ("-" for the hubs, which grant credits and hold none); then each
       hub's uptime, the gateway's requests and error rate, the replicas each stage lost (a
       restart is one), and "ready: yes" when every stage has a live replica.
       Exit status 1 when not ready or a hub does not answer within 1 s (reported as down).
keygen writes a CurveZMQ key pair per NAME into DIR (default .; made if missing): DIR/NAME, the
       public key (give it to the hubs' allow lists, or to the clients of a hub), and
       DIR/NAME_secret, both keys, mode 0600 (czmq's certificate format; docs/DEPLOY.md). It
       never overwrites a file.

exit status: 0 ok, 1 the pipeline answered an error or did not answer, 2 bad usage or bad config
)";

// Where the service executables are: next to this binary, or in the build tree's services/.
std::string service_binary(const std::string& name) {
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  for (const fs::path& candidate :
       {self / ("seqpipe-" + name), self.parent_path() / "services" / name / ("seqpipe-" + name)}) {
    if (fs::exists(candidate)) return candidate.string();
  }
  return "seqpipe-" + name;  // from PATH (installed)
}

void print_metrics_ports(const config::PipelineConfig& c);

// The runtime dir's pipeline lock, held while `up` runs; nullopt (with the reason printed)
// when another pipeline holds it or the dir cannot be made.
std::optional<seqpipe::FileLock> lock_runtime_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::create_directories(dir, ec)) fs::permissions(dir, fs::perms::owner_all, ec);
  if (ec) {
    std::fprintf(stderr, "seqpipe up: runtime_dir: cannot create '%s': %s\n", dir.c_str(),
                 ec.message().c_str());
    return std::nullopt;
  }
  pid_t holder = 0;
  auto lock = seqpipe::FileLock::try_acquire(dir + "/seqpipe.lock", &holder);
  if (!lock) {
    std::fprintf(stderr,
                 "seqpipe up: runtime dir %s is in use by the pipeline of pid %d (its "
                 "seqpipe.lock); stop it first, or give this one another runtime_dir\n",
                 dir.c_str(), static_cast<int>(holder));
  }
  return lock;
}

// `up`'s arguments with `--repository DIR` (or --repository=DIR) as `--set model.repository=DIR`.
std::vector<std::string> repository_as_set(int argc, char** argv) {
  std::vector<std::string> words;
  for (int i = 0; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--repository" && i + 1 < argc) {
      words.insert(words.end(), {"--set", std::string("model.repository=") + argv[++i]});
    } else if (word.starts_with("--repository=")) {
      words.insert(words.end(), {"--set", "model.repository=" + word.substr(13)});
    } else {
      words.push_back(word);
    }
  }
  return words;
}

int up(int argc_in, char** argv_in) {
  std::vector<std::string> words = repository_as_set(argc_in, argv_in);
  std::vector<char*> pointers;
  for (std::string& w : words) pointers.push_back(w.data());
  const int argc = static_cast<int>(pointers.size());
  char** argv = pointers.data();
  const seqpipe::service::ServiceArgs args = seqpipe::service::parse_service_args(argc, argv);
  if (args.help) {
    std::cout << kUsage;
    return 0;
  }
  const config::LoadedConfig loaded =
      config::load_pipeline_config(args.config_path, args.overrides);
  const config::PipelineConfig& c = loaded.config;
  if (args.print_config) {
    std::cout << config::to_yaml(c) << std::flush;
    return 0;
  }
  const config::ModelRepository repo = c.model.repository.empty()
                                           ? config::ModelRepository{}
                                           : config::scan_repository(c.model.repository);
  if (c.model.repository.empty()) {
    if (const auto problems = seqpipe::supervisor::check_model_dir(c.model.dir);
        !problems.empty()) {
      for (const std::string& p : problems) std::fprintf(stderr, "seqpipe up: %s\n", p.c_str());
      return 2;
    }
  } else {
    // A bad entry is left out (the others are served); a repository with nothing to serve stops.
    for (const auto& bad : repo.bad)
      std::fprintf(stderr, "seqpipe up: model repository: %s: %s (not served)\n", bad.path.c_str(),
                   bad.reason.c_str());
    if (repo.models.empty()) {
      std::fprintf(stderr, "seqpipe up: model.repository '%s' holds no model to serve\n",
                   c.model.repository.c_str());
      return 2;
    }
  }
  // One pipeline per runtime dir: a second would take the first's socket files from under it.
  const auto lock = lock_runtime_dir(c.runtime_dir);
  if (!lock) return 2;
  // A bad key file found now, not after every process has started and the hubs exited.
  seqpipe::security::check_key_files(c.security);
  std::vector<std::string> common_args;
  if (!loaded.path.empty()) common_args = {"--config", loaded.path};
  for (const auto& o : args.overrides) common_args.insert(common_args.end(), {"--set", o});
  common_args.insert(common_args.end(), {"--set", "runtime_dir=" + c.runtime_dir});

  std::vector<seqpipe::supervisor::ChildSpec> specs;
  // Hub replica i gets its own endpoints and ports (config::*_replica_overrides).
  using Overrides = std::vector<std::string> (*)(const config::PipelineConfig&, int);
  auto add = [&](const std::string& stage, int replicas, Overrides overrides = nullptr) {
    for (int i = 0; i < replicas; ++i) {
      seqpipe::supervisor::ChildSpec child{stage, i, {service_binary(stage)}};
      child.argv.insert(child.argv.end(), common_args.begin(), common_args.end());
      for (const std::string& o : overrides ? overrides(c, i) : std::vector<std::string>{})
        child.argv.insert(child.argv.end(), {"--set", o});
      specs.push_back(std::move(child));
    }
  };
  add("batcher", c.batcher.replicas, config::batcher_replica_overrides);
  add("gateway", c.gateway.replicas, config::gateway_replica_overrides);
  for (const auto& w : seqpipe::supervisor::worker_specs(c, repo.models)) {
    seqpipe::supervisor::ChildSpec child{w.stage, w.replica, {service_binary(w.stage)}};
    child.argv.insert(child.argv.end(), common_args.begin(), common_args.end());
    for (const std::string& o : w.sets) child.argv.insert(child.argv.end(), {"--set", o});
    specs.push_back(std::move(child));
  }

  // More engine threads than cores: an OpenMP thread that spins while it waits holds a core that
  // a hub, another stage or the very thread it waits for needs (libgomp reads this at start, so
  // only the children's environment can carry it). A value the user set is kept.
  const int cores = config::available_cores();
  const bool passive = config::engine_threads_oversubscribe(c, cores);
  if (passive) ::setenv("OMP_WAIT_POLICY", "passive", 0);
  seqpipe::service::install_stop_handlers();
  seqpipe::supervisor::ChildProcesses children(std::move(specs));
  children.start();
  std::printf("seqpipe up: %zu processes; clients connect to %s (runtime dir %s); Ctrl-C stops\n",
              children.size(), config::client_endpoints(c).c_str(), c.runtime_dir.c_str());
  // Which settings are in force, lowest layer first (config::load_pipeline_config).
  std::printf("seqpipe up: model %s; config: built-in defaults < %s < %s < %zu --set\n",
              c.model.dir.c_str(),
              loaded.model_path.empty() ? "(no model seqpipe.yaml)" : loaded.model_path.c_str(),
              loaded.path.empty() ? "(no config file)" : loaded.path.c_str(),
              args.overrides.size());
  std::printf(
      "seqpipe up: %d cores: %d tokenizer(s), %d encoder(s) x %d threads, %d decoder(s) x %d "
      "threads, %d postprocessor(s); OMP_WAIT_POLICY=%s\n",
      cores, c.tokenizer.replicas, c.encoder.replicas, c.encoder.threads, c.decoder.replicas,
      c.decoder.threads, c.postprocessor.replicas,
      std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "(libgomp default)");
  print_metrics_ports(c);
  const bool gave_up = children.supervise(seqpipe::service::stop_requested);
  children.stop(std::chrono::seconds(5));  // SIGTERM, up to 5 s to drain, then SIGKILL
  std::printf("seqpipe up: stopped\n");
  return gave_up ? 1 : 0;
}

// Metrics: the configured ports (a replica takes the first free one from its stage's base;
// each process logs the port it got, and 0 means any free port).
void print_metrics_ports(const config::PipelineConfig& c) {
  auto ports = [](int base, int replicas) {
    if (base == 0) return std::string("any free port");
    return replicas == 1 ? ":" + std::to_string(base)
                         : ":" + std::to_string(base) + "-" + std::to_string(base + replicas - 1);
  };
  std::printf(
      "seqpipe up: /metrics on 127.0.0.1 gateway %s, batcher %s, tokenizer %s, encoder %s, decoder "
      "%s, "
      "postprocessor %s\n",
      ports(c.gateway.metrics_port, 1).c_str(), ports(c.batcher.metrics_port, 1).c_str(),
      ports(c.tokenizer.metrics_port, c.tokenizer.replicas).c_str(),
      ports(c.encoder.metrics_port, c.encoder.replicas).c_str(),
      ports(c.decoder.metrics_port, c.decoder.replicas).c_str(),
      ports(c.postprocessor.metrics_port, c.postprocessor.replicas).c_str());
  std::fflush(stdout);
}

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

int send(int argc, char** argv) {
  std::string config_path, endpoint;
  std::vector<std::string> overrides;
  seqpipe::protocol::Request request;
  std::optional<uint32_t> cancel_after_ms;
  bool help = false;
  CLI::App app;
  cli::set_up(app);
  app.add_flag("-h,--help", help);
  app.add_option("--config", config_path);
  cli::add_repeated(app, "--set", overrides);
  app.add_option("--endpoint", endpoint);
  cli::add_number(app, "--num-beams", request.params.num_beams);
  cli::add_number(app, "--max-new-tokens", request.params.max_new_tokens);
  cli::add_number(app, "--min-new-tokens", request.params.min_new_tokens);
  cli::add_number(app, "--timeout-ms", request.timeout_ms);
  app.add_flag("--scores", request.params.return_scores);
  cli::add_number(app, "--priority", request.params.priority);
  cli::add_number(app, "--cancel-after-ms", cancel_after_ms);
  cli::add_number(app, "--num-return-sequences", request.params.num_return_sequences);
  app.add_flag("--do-sample", request.params.do_sample);
  cli::add_number(app, "--temperature", request.params.temperature);
  cli::add_number(app, "--top-k", request.params.top_k);
  cli::add_number(app, "--top-p", request.params.top_p);
  cli::add_number(app, "--seed", request.params.seed);
  cli::add_number(app, "--repetition-penalty", request.params.repetition_penalty);
  cli::add_number(app, "--no-repeat-ngram-size", request.params.no_repeat_ngram_size);
  cli::add_repeated(app, "--stop", request.params.stop);
  app.add_flag("--stream", request.stream);
  app.add_option("TEXT", request.texts);
  const std::vector<std::string> unknown = cli::parse(app, argc, argv);
  if (help) {
    std::cout << kUsage;
    return 0;
  }
  if (!unknown.empty()) throw cli::UsageError("unknown option '" + unknown.front() + "'");
  if (request.texts.empty()) throw cli::UsageError("give the text to send");
  if (request.stream && cancel_after_ms)
    throw cli::UsageError("--stream and --cancel-after-ms do not go together");
  request.batch_form = request.texts.size() > 1;
  const config::PipelineConfig c = config::load_pipeline_config(config_path, overrides).config;
  if (endpoint.empty()) endpoint = config::client_endpoints(c);

  seqpipe::client::Client client(endpoint, {.curve = seqpipe::security::client_keys(c.security)});
  // The gateway answers every request by its deadline (deadline_exceeded at worst), so a second
  // past it with nothing back means no gateway is there: say so then, not after a long wait.
  const uint32_t deadline_ms = request.timeout_ms.value_or(c.gateway.default_timeout_ms);
  const auto wait = std::chrono::milliseconds(deadline_ms + 1000);
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

// What the config says about the pipeline `seqpipe status` asks: the model, its compute type and
// where to reach it (the hubs' answers say how it is doing).
void print_pipeline_summary(const config::LoadedConfig& loaded) {
  const config::PipelineConfig& c = loaded.config;
  std::printf("model: %s, compute type %s (config: %s%s%s)\n", c.model.dir.c_str(),
              c.model.compute_type.c_str(),
              loaded.path.empty() ? "built-in defaults" : loaded.path.c_str(),
              loaded.model_path.empty() ? "" : " over ", loaded.model_path.c_str());
  const auto http = config::parse_http_address(c.gateway.http_endpoint);
  const auto grpc = config::parse_http_address(c.gateway.grpc_endpoint);
  std::printf("clients: %s; HTTP: %s; gRPC: %s; /metrics: %s:%d (gateway), :%d (batcher)\n",
              config::client_endpoints(c).c_str(), http ? c.gateway.http_endpoint.c_str() : "off",
              grpc ? c.gateway.grpc_endpoint.c_str() : "off", c.metrics.address.c_str(),
              c.gateway.metrics_port, c.batcher.metrics_port);
}

std::string duration_text(int64_t seconds) {
  char text[32];
  if (seconds >= 3600) {
    std::snprintf(text, sizeof text, "%lldh%02lldm", static_cast<long long>(seconds / 3600),
                  static_cast<long long>(seconds / 60 % 60));
  } else {
    std::snprintf(text, sizeof text, "%lldm%02llds", static_cast<long long>(seconds / 60),
                  static_cast<long long>(seconds % 60));
  }
  return text;
}

// One line per hub that answered: how long it has run, its error rate (the gateway) and the
// replicas it lost (each is one restart under `seqpipe up` or systemd).
void print_hub_lines(const seqpipe::status::PipelineStatus& status) {
  for (const auto& hub : status.hubs) {
    if (!hub.stages || hub.stages->empty()) continue;
    const auto& own = hub.stages->front();
    std::string line = hub.hub + ": up " + duration_text(own.uptime_s);
    if (hub.hub == "gateway") {
      const double rate = own.requests == 0 ? 0.0 : 100.0 * own.errors / own.requests;
      char text[96];
      std::snprintf(text, sizeof text, "; %lld requests, %lld errors (%.2f%%)",
                    static_cast<long long>(own.requests), static_cast<long long>(own.errors), rate);
      line += text;
    }
    line += "; replicas lost:";
    for (size_t i = 1; i < hub.stages->size(); ++i) {
      const auto& st = (*hub.stages)[i];
      line += (i == 1 ? " " : ", ") + st.stage + " " + std::to_string(st.lost);
    }
    std::printf("%s\n", line.c_str());
  }
}

int status_command(int argc, char** argv) {
  const seqpipe::service::ServiceArgs args = seqpipe::service::parse_service_args(argc, argv);
  if (args.help) {
    std::cout << kUsage;
    return 0;
  }
  const config::LoadedConfig loaded =
      config::load_pipeline_config(args.config_path, args.overrides);
  const config::PipelineConfig& c = loaded.config;
  zmq::context_t context(1);
  const auto status = seqpipe::status::ask_pipeline(context, c, std::chrono::milliseconds(1000),
                                                    seqpipe::security::client_keys(c.security));
  print_pipeline_summary(loaded);
  std::printf("%-14s %8s %10s %8s %13s\n", "stage", "replicas", "in_flight", "queued",
              "free_credits");
  for (const auto& hub : status.hubs) {
    if (!hub.stages) {
      std::printf("%-14s %s (no answer on %s)\n", hub.hub.c_str(), "down", hub.endpoint.c_str());
      continue;
    }
    for (const auto& st : *hub.stages) {
      // A hub grants credits and holds none: "-", not a 0 that reads as "no capacity".
      const std::string free =
          st.free_credits == seqpipe::status::kNoCredits ? "-" : std::to_string(st.free_credits);
      std::printf("%-14s %8d %10d %8d %13s\n", st.stage.c_str(), st.replicas, st.in_flight,
                  st.queued, free.c_str());
    }
  }
  print_hub_lines(status);
  std::string why;
  for (const auto& m : status.missing) why += (why.empty() ? "" : ", ") + m;
  std::printf("ready: %s\n", status.ready() ? "yes" : ("no: no live " + why).c_str());
  return status.ready() ? 0 : 1;
}

}  // namespace

int keygen(int argc, char** argv) {
  std::string dir = ".";
  std::vector<std::string> names;
  bool help = false;
  CLI::App app;
  cli::set_up(app);
  app.add_flag("-h,--help", help);
  app.add_option("--dir", dir);
  app.add_option("NAME", names);
  const std::vector<std::string> unknown = cli::parse(app, argc, argv);
  if (help) {
    std::cout << kUsage;
    return 0;
  }
  if (!unknown.empty()) throw cli::UsageError("unknown option '" + unknown.front() + "'");
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

int main(int argc, char** argv) {
  try {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
      std::cout << kUsage;
      return argc < 2 ? 2 : 0;
    }
    const std::string command = argv[1];
    if (command == "up") return up(argc - 1, argv + 1);
    if (command == "send") return send(argc - 1, argv + 1);
    if (command == "status") return status_command(argc - 1, argv + 1);
    if (command == "keygen") return keygen(argc - 1, argv + 1);
    throw cli::UsageError("unknown command '" + command + "'");
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
