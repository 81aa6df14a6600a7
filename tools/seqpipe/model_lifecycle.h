#pragma once
// Live load, unload and reload of a repository's model versions under `seqpipe up`. A load
// starts the version's replicas and routes to it once every stage has a live (warmed-up) replica
// of it; an unload stops routing to it, waits until no gateway holds a request of it, then stops
// its replicas; a load of a name's version unloads the name's other versions once it is ready
// (a reload: load, then unload, so no request is dropped). The gateways learn what to route to
// from the catalog message (model_control.h), sent to each one after every change and once a
// second (a restarted gateway catches up). Requests come from the control socket; each is
// answered when it is done.
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "seqpipe/child_processes.h"
#include "seqpipe/config/config.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/repository_poll.h"
#include "seqpipe/runtime/model_control.h"

namespace seqpipe::supervisor {

class ModelLifecycle {
 public:
  // `replicas(version)`: the children that serve a model version (all of group model_key).
  using Replicas = std::function<std::vector<ChildSpec>(const config::ModelVersion&)>;
  ModelLifecycle(zmq::context_t& context, const config::PipelineConfig& config,
                 ChildProcesses& children, Replicas replicas);

  // The versions `seqpipe up` started with: routed at once (the gateways start with them), READY
  // once warm.
  void started(const config::ModelRepository& repository);
  // A control request from the client behind routing id `client`: answered (take_replies) now or
  // when done.
  void on_request(const std::string& client, const model_control::ControlRequest& request);
  // Children given up: their version is not served (UNAVAILABLE with the reason).
  void given_up(const std::vector<GivenUp>& given_up);
  // One round: loads that warmed up (or timed out), the catalog to the gateways, unloads drained.
  void tick(Clock::time_point now);
  // Replies due, by client routing id.
  std::vector<std::pair<std::string, model_control::ControlReply>> take_replies();
  model_control::ControlReply index() const;

 private:
  struct Version {
    config::ModelVersion model;
    model_control::State state = model_control::State::kLoading;
    std::string reason;
    bool routed = false;   // in the gateways' catalog
    bool stopped = false;  // unloading: its replicas stopped, the hubs yet to see them leave
    Clock::time_point since{};
  };
  // A request waiting: for `load` (its version ready), then for `unloads` to finish.
  struct Pending {
    std::string client;
    std::string load;  // empty: an unload
    std::vector<std::string> unloads;
  };
  void load(const std::string& client, const model_control::ControlRequest& request);
  void unload(const std::string& client, const model_control::ControlRequest& request);
  void start_unloading(const std::string& key);
  void fail(const std::string& key, const std::string& reason);
  void check_loads(Clock::time_point now);
  void push_catalog(Clock::time_point now);
  void check_unloads(Clock::time_point now);
  void finish_pending();
  void reply_error(const std::string& client, protocol::ErrorCode code, const std::string& why);

  zmq::context_t& context_;
  const config::PipelineConfig& config_;
  ChildProcesses& children_;
  Replicas replicas_;
  // A loading version's replicas start at SCHED_IDLE (ChildSpec::start_idle), when they will be
  // able to leave it: their start-up then takes no core from the versions serving.
  bool idle_starts_;
  std::map<std::string, Version> versions_;  // by model key
  std::vector<Pending> pending_;
  std::vector<std::pair<std::string, model_control::ControlReply>> replies_;
  Clock::time_point last_push_{}, last_load_check_{}, last_unload_check_{};
  bool changed_ = false;  // the catalog changed since it was last sent to every gateway
};

}  // namespace seqpipe::supervisor

namespace seqpipe::supervisor {

// supervise() with a repository: restarts children, answers the control socket bound at
// `control_endpoint`, passes `poll`'s requests on when it is due and runs `lifecycle`'s rounds
// until `stop_requested`; a model version's child given up stops that version only. True when a
// hub was given up (the pipeline stops).
bool supervise_models(zmq::context_t& context, const std::string& control_endpoint,
                      ChildProcesses& children, ModelLifecycle& lifecycle, RepositoryPoll& poll,
                      const std::function<bool()>& stop_requested);

}  // namespace seqpipe::supervisor
