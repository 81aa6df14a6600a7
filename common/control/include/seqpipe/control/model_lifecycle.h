#pragma once
// Live load, unload and reload of a repository's model versions under `seqpipe up`. A load
// starts the version's replicas and routes to it once every stage has a live (warmed-up) replica
// of it; an unload stops routing to it, waits until no gateway holds a request of it, then stops
// its replicas; a load of a name's version unloads the name's other versions once it is ready
// (a reload: load, then unload, so no request is dropped). The gateways learn what to route to
// from the catalog message (model_control.h), sent to each one after every change and once a
// second (a restarted gateway catches up). Requests come from the control socket; each is
// answered when it is done.
//
// A decision, as the hub's WorkerPool: time is passed in, and the processes, hubs and gateways
// are reached through World, so tests drive it without sockets or processes. `seqpipe up`'s
// World (tools/seqpipe/model_supervision.h) starts child processes and asks over ZeroMQ.
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "seqpipe/config/model_repository.h"
#include "seqpipe/control/model_control.h"

namespace seqpipe::control {

using Clock = std::chrono::steady_clock;

// How often an unchanged catalog goes to the gateways again (for a gateway that restarted with
// its config's catalog).
inline constexpr std::chrono::seconds kCatalogRefresh{1};
// How often a load or unload asks the hubs whether its replicas came or left.
inline constexpr std::chrono::milliseconds kHubCheck{250};
// An unloaded version's replicas have this long to finish and exit before SIGKILL (they hold no
// request by then); a version given up, this long.
inline constexpr std::chrono::seconds kStopDrain{5};
inline constexpr std::chrono::seconds kFailedStopDrain{1};
// The hubs see a stopped replica leave at once (its connection drops) or after missed heartbeats;
// an unload waits that long at most for them (a hub that does not answer cannot say).
inline constexpr std::chrono::seconds kLeaveWait{30};

// What the hubs say of some model versions' replicas.
struct HubView {
  bool all_answered = false;      // every hub answered with its stages
  std::set<std::string> ready;    // versions with a live replica on every worker stage
  std::set<std::string> present;  // versions some hub still counts a live replica of
};

// What the lifecycle acts on: the repository on disk, the processes and the two kinds of hub.
class World {
 public:
  virtual ~World() = default;
  // The repository as it is on disk now.
  virtual config::ModelRepository scan() = 0;
  // Starts the replicas of `version` (their group: its model key).
  virtual void start_replicas(const config::ModelVersion& version) = 0;
  // Stops the replicas of `key`, each given `drain` to exit before it is killed.
  virtual void stop_replicas(const std::string& key, std::chrono::milliseconds drain) = 0;
  // Asks the hubs about `keys`.
  virtual HubView ask_hubs(const std::vector<std::string>& keys) = 0;
  // Sends the catalog to every gateway: their requests in flight per version, summed; nullopt
  // when one of them did not answer.
  virtual std::optional<model_control::InFlight> send_catalog(
      const std::vector<config::ModelVersion>& catalog) = 0;
};

class ModelLifecycle {
 public:
  // `repository`: model.repository, for the messages (a request names what is not in it).
  ModelLifecycle(std::string repository, World& world);

  // The versions `seqpipe up` started with: routed at once (the gateways start with them), READY
  // once warm.
  void started(const config::ModelRepository& repository, Clock::time_point now);
  // A control request from the client behind routing id `client`: answered (take_replies) now or
  // when done.
  void on_request(const std::string& client, const model_control::ControlRequest& request,
                  Clock::time_point now);
  // A child of version `key` was given up: the version is not served (UNAVAILABLE with `reason`).
  void given_up(const std::string& key, const std::string& reason);
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
  void load(const std::string& client, const model_control::ControlRequest& request,
            Clock::time_point now);
  void unload(const std::string& client, const model_control::ControlRequest& request,
              Clock::time_point now);
  void start_unloading(const std::string& key, Clock::time_point now);
  void fail(const std::string& key, const std::string& reason);
  void check_loads(Clock::time_point now);
  void push_catalog(Clock::time_point now);
  void check_unloads(Clock::time_point now);
  void finish_pending(Clock::time_point now);
  void reply_error(const std::string& client, protocol::ErrorCode code, const std::string& why);

  std::string repository_;
  World& world_;
  std::map<std::string, Version> versions_;  // by model key
  std::vector<Pending> pending_;
  std::vector<std::pair<std::string, model_control::ControlReply>> replies_;
  Clock::time_point last_push_{}, last_load_check_{}, last_unload_check_{};
  bool changed_ = false;  // the catalog changed since it was last sent to every gateway
};

}  // namespace seqpipe::control
