#pragma once
// `seqpipe up` with a model repository: the control plane's lifecycle (control/model_lifecycle.h)
// wired to the real world, child processes and the hubs over ZeroMQ, and the loop that serves
// the control socket.
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "seqpipe/child_processes.h"
#include "seqpipe/config/config.h"
#include "seqpipe/control/model_control.h"
#include "seqpipe/control/model_lifecycle.h"
#include "seqpipe/control/repository_poll.h"

namespace seqpipe::supervisor {

// The lifecycle's World: scans config.model.repository, starts a version's replicas as children
// (`replicas(version)`), asks the hubs (status probe) and gateways (catalog) over `context`. The
// catalog carries each version's settings (model_control::VersionSettings), loaded here with
// `version_config` as its replicas start, so no gateway's loop reads a model's files.
class PipelineWorld : public control::World {
 public:
  // `replicas(version)`: the children that serve a model version (all of group model_key).
  using Replicas = std::function<std::vector<ChildSpec>(const config::ModelVersion&)>;
  PipelineWorld(zmq::context_t& context, const config::PipelineConfig& config,
                ChildProcesses& children, Replicas replicas,
                model_control::VersionConfig version_config);

  config::ModelRepository scan() override;
  void start_replicas(const config::ModelVersion& version) override;
  void stop_replicas(const std::string& key, std::chrono::milliseconds drain) override;
  control::HubView ask_hubs(const std::vector<std::string>& keys) override;
  std::optional<model_control::InFlight> send_catalog(
      const std::vector<config::ModelVersion>& catalog) override;

 private:
  // Loads version `m`'s settings into settings_.
  const model_control::CatalogEntry& load_settings(const config::ModelVersion& m);
  // `catalog` with each version's settings (settings_, loading those not there).
  std::vector<model_control::CatalogEntry> with_settings(
      const std::vector<config::ModelVersion>& catalog);

  zmq::context_t& context_;
  const config::PipelineConfig& config_;
  ChildProcesses& children_;
  Replicas replicas_;
  model_control::VersionConfig version_config_;
  // Each version's settings by key, loaded as its replicas start (or, for the versions started
  // with the pipeline, with the first catalog): the catalog goes out every second.
  std::map<std::string, model_control::CatalogEntry> settings_;
  // A loading version's replicas start at SCHED_IDLE (ChildSpec::start_idle), when they will be
  // able to leave it: their start-up then takes no core from the versions serving.
  bool idle_starts_;
};

// supervise() with a repository: restarts children, answers the control socket bound at
// `control_endpoint`, passes `poll`'s requests on when it is due and runs `lifecycle`'s rounds
// until `stop_requested`; a model version's child given up stops that version only. True when a
// hub was given up (the pipeline stops).
bool supervise_models(zmq::context_t& context, const std::string& control_endpoint,
                      ChildProcesses& children, control::ModelLifecycle& lifecycle,
                      control::RepositoryPoll& poll, const std::function<bool()>& stop_requested);

}  // namespace seqpipe::supervisor
