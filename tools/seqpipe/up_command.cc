#include "seqpipe/up_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "seqpipe/child_processes.h"
#include "seqpipe/config/config.h"
#include "seqpipe/model_supervision.h"
#include "seqpipe/runtime/service.h"
#include "seqpipe/security/security.h"
#include "seqpipe/supervisor.h"
#include "seqpipe/transport/file_lock.h"

namespace seqpipe::supervisor {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUpFooter =
    R"(Starts the whole pipeline on this machine as child processes: gateway.replicas gateways and
batcher.replicas batchers (default 1 each; replica k on the endpoints and ports k after the
configured ones), and `replicas` copies of the tokenizer, encoder, decoder and postprocessor
(config/pipeline.yaml, docs/CONFIG.md; 0, the default, sizes them and the encoders' and decoders'
threads from the cores and the model, and GOMP_SPINCOUNT=3000 is set when those threads
outnumber the cores: docs/CONFIG.md, "Sizing"), every one with the same --config and --set
arguments. It prints the sizing, the client endpoint and the metrics ports, restarts a child that
dies (after 0.5 s, doubling while it keeps failing), and stops everything on Ctrl-C or SIGTERM.
It checks the config and the model directory before starting anything, and stops with the error
(exit status 1) when a child exits with status 2 (bad usage or config, or an address in use) or
exits 5 times in a row within 5 s of its start. Its children die with it, even when it is
killed. It prints the config files in force: the model directory's seqpipe.yaml (the model's own
settings), then the config file, then --set (docs/CONFIG.md, "The model's settings").
--repository DIR (model.repository) serves a model repository: DIR/<name>/<version>/ (a model
directory directly in DIR is version 1); the worker stages' replicas are started for every model
version in it, and a request names its model (`model`, `version`); entries that cannot be served
are printed and left out. It then answers `seqpipe models list|load|unload` (and the gateway's
POST /v2/repository/...) on ipc://<runtime_dir>/control.sock: a load starts a version's replicas
and routes to it once warm, an unload stops routing, waits for its requests, then stops them; a
model version whose replica is given up is not served, and the others go on. With
model.repository_poll_ms > 0 it rescans DIR that often and loads a name's new newest version (a
reload), unloads a removed one; a version that failed is tried again when its files change.
Exit status: 0 stopped, 1 a child kept failing (a hub, with a repository), 2 bad usage, config or
model directory.)";

// Where the service executables are: next to this binary, or in the build tree's services/.
std::string service_binary(const std::string& name) {
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  for (const fs::path& candidate :
       {self / ("seqpipe-" + name), self.parent_path() / "services" / name / ("seqpipe-" + name)}) {
    if (fs::exists(candidate)) return candidate.string();
  }
  return "seqpipe-" + name;  // from PATH (installed)
}

// The runtime dir's pipeline lock, held while `up` runs; nullopt (with the reason printed)
// when another pipeline holds it or the dir cannot be made.
std::optional<FileLock> lock_runtime_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::create_directories(dir, ec)) fs::permissions(dir, fs::perms::owner_all, ec);
  if (ec) {
    std::fprintf(stderr, "seqpipe up: runtime_dir: cannot create '%s': %s\n", dir.c_str(),
                 ec.message().c_str());
    return std::nullopt;
  }
  pid_t holder = 0;
  auto lock = FileLock::try_acquire(dir + "/seqpipe.lock", &holder);
  if (!lock) {
    std::fprintf(stderr,
                 "seqpipe up: runtime dir %s is in use by the pipeline of pid %d (its "
                 "seqpipe.lock); stop it first, or give this one another runtime_dir\n",
                 dir.c_str(), static_cast<int>(holder));
  }
  return lock;
}

// Whether `up` has something to serve: model.dir holds a model, or the repository at least one
// (its bad entries printed: they are left out). The problems go to stderr.
bool models_servable(const config::PipelineConfig& c, const config::ModelRepository& repo) {
  if (c.model.repository.empty()) {
    const auto problems = check_model_dir(c.model.dir);
    for (const std::string& p : problems) std::fprintf(stderr, "seqpipe up: %s\n", p.c_str());
    return problems.empty();
  }
  for (const auto& bad : repo.bad)
    std::fprintf(stderr, "seqpipe up: model repository: %s: %s (not served)\n", bad.path.c_str(),
                 bad.reason.c_str());
  if (repo.models.empty()) {
    std::fprintf(stderr, "seqpipe up: model.repository '%s' holds no model to serve\n",
                 c.model.repository.c_str());
  }
  return !repo.models.empty();
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

// What `up` started and with which settings.
void print_started(const config::LoadedConfig& loaded, size_t processes, size_t overrides,
                   int cores, const std::string& openmp_waits) {
  const config::PipelineConfig& c = loaded.config;
  std::printf("seqpipe up: %zu processes; clients connect to %s (runtime dir %s); Ctrl-C stops\n",
              processes, config::client_endpoints(c).c_str(), c.runtime_dir.c_str());
  // Which settings are in force, lowest layer first (config::load_pipeline_config).
  std::printf("seqpipe up: model %s; config: built-in defaults < %s < %s < %zu --set\n",
              c.model.dir.c_str(),
              loaded.model_path.empty() ? "(no model seqpipe.yaml)" : loaded.model_path.c_str(),
              loaded.path.empty() ? "(no config file)" : loaded.path.c_str(), overrides);
  std::printf(
      "seqpipe up: %d cores: %d tokenizer(s), %d encoder(s) x %d threads, %d decoder(s) x %d "
      "threads, %d postprocessor(s); OpenMP waits: %s\n",
      cores, c.tokenizer.replicas, c.encoder.replicas, c.encoder.threads, c.decoder.replicas,
      c.decoder.threads, c.postprocessor.replicas, openmp_waits.c_str());
  print_metrics_ports(c);
  if (!c.model.repository.empty()) {
    std::printf("seqpipe up: model control on %s (seqpipe models; POST /v2/repository/...)\n",
                config::control_endpoint(c).c_str());
    std::fflush(stdout);
  }
}

// The children of a pipeline: the hubs, and each model version's worker replicas, every one with
// the same --config and --set arguments.
class PipelineChildren {
 public:
  PipelineChildren(const config::LoadedConfig& loaded, const std::vector<std::string>& overrides)
      : c_(loaded.config) {
    if (!loaded.path.empty()) common_args_ = {"--config", loaded.path};
    for (const auto& o : overrides) common_args_.insert(common_args_.end(), {"--set", o});
    common_args_.insert(common_args_.end(), {"--set", "runtime_dir=" + c_.runtime_dir});
  }

  // The hubs' replicas: replica i gets its own endpoints and ports (config::*_replica_overrides).
  std::vector<ChildSpec> hubs() const {
    std::vector<ChildSpec> specs;
    using Overrides = std::vector<std::string> (*)(const config::PipelineConfig&, int);
    auto add = [&](const std::string& stage, int replicas, Overrides overrides) {
      for (int i = 0; i < replicas; ++i) {
        ChildSpec child = spec(stage, i);
        for (const std::string& o : overrides(c_, i))
          child.argv.insert(child.argv.end(), {"--set", o});
        specs.push_back(std::move(child));
      }
    };
    add("batcher", c_.batcher.replicas, config::batcher_replica_overrides);
    add("gateway", c_.gateway.replicas, config::gateway_replica_overrides);
    return specs;
  }

  // A model version's replicas (`versions`: one; none: model.dir's): started with the pipeline,
  // or by a load (`seqpipe models load`).
  std::vector<ChildSpec> workers(const std::vector<config::ModelVersion>& versions) const {
    std::vector<ChildSpec> children;
    for (const auto& w : worker_specs(c_, versions)) {
      ChildSpec child = spec(w.stage, w.replica);
      for (const std::string& o : w.sets) child.argv.insert(child.argv.end(), {"--set", o});
      if (versions.size() == 1)
        child.group = config::model_key(versions[0].name, versions[0].version);
      children.push_back(std::move(child));
    }
    return children;
  }

 private:
  ChildSpec spec(const std::string& stage, int replica) const {
    ChildSpec child{stage, replica, {service_binary(stage)}};
    child.argv.insert(child.argv.end(), common_args_.begin(), common_args_.end());
    return child;
  }

  const config::PipelineConfig& c_;
  std::vector<std::string> common_args_;
};

// Runs `children` until a stop is asked or a child is given up: with a repository, with its
// control plane (`served`: the versions started). True when given up.
bool supervise(const config::LoadedConfig& loaded, const config::ModelRepository& served,
               const PipelineChildren& specs, ChildProcesses& children) {
  const config::PipelineConfig& c = loaded.config;
  if (c.model.repository.empty()) return children.supervise(service::stop_requested);
  zmq::context_t context(1);
  PipelineWorld world(
      context, c, children, [&](const config::ModelVersion& m) { return specs.workers({m}); },
      config::version_config_loader(loaded));
  control::ModelLifecycle lifecycle(c.model.repository, world);
  lifecycle.started(served, Clock::now());
  control::RepositoryPoll poll(c.model.repository,
                               std::chrono::milliseconds(c.model.repository_poll_ms));
  poll.started(served, Clock::now());
  return supervise_models(context, config::control_endpoint(c), children, lifecycle, poll,
                          service::stop_requested);
}

int up(const service::ServiceArgs& args) {
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
  if (!models_servable(c, repo)) return 2;
  // One pipeline per runtime dir: a second would take the first's socket files from under it.
  const auto lock = lock_runtime_dir(c.runtime_dir);
  if (!lock) return 2;
  // A bad key file found now, not after every process has started and the hubs exited.
  security::check_key_files(c.security);
  const PipelineChildren specs(loaded, args.overrides);
  std::vector<ChildSpec> started = specs.hubs();
  if (c.model.repository.empty()) {
    for (auto& child : specs.workers({})) started.push_back(std::move(child));
  }
  // With a repository, each name's newest versions load at start (model.repository_versions).
  config::ModelRepository served = repo;
  served.models = config::newest_versions(repo.models, c.model.repository_versions);
  for (const auto& m : served.models)
    for (auto& child : specs.workers({m})) started.push_back(std::move(child));

  const int cores = config::available_cores();
  const std::string waits = set_openmp_waits(c, cores);
  service::install_stop_handlers();
  ChildProcesses children(std::move(started));
  children.start();
  print_started(loaded, children.size(), args.overrides.size(), cores, waits);
  const bool gave_up = supervise(loaded, served, specs, children);
  children.stop(std::chrono::seconds(5));  // SIGTERM, up to 5 s to drain, then SIGKILL
  std::printf("seqpipe up: stopped\n");
  return gave_up ? 1 : 0;
}

}  // namespace

CLI::App* add_up_command(CLI::App& app, UpArgs& args) {
  CLI::App* up = app.add_subcommand("up", "start every stage as child processes");
  service::add_service_flags(*up, args.flags, true);
  up->add_option("--repository", args.repository,
                 "serve the model repository DIR/<name>/<version>/ (model.repository)")
      ->type_name("DIR");
  up->footer(kUpFooter);
  return up;
}

int up_command(UpArgs args) {
  service::ServiceArgs checked = service::checked_service_args(std::move(args.flags));
  if (!args.repository.empty()) checked.overrides.push_back("model.repository=" + args.repository);
  return up(checked);
}

}  // namespace seqpipe::supervisor
