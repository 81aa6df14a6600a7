#include "seqpipe/model_lifecycle.h"

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <utility>

#include "seqpipe/observability/status.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/security/security.h"

namespace seqpipe::supervisor {
namespace {

using model_control::State;

// How long a round waits for a hub's or gateway's answer, and how often an unchanged catalog goes
// to the gateways again (for a gateway that restarted with its config's catalog).
constexpr std::chrono::milliseconds kAnswerWait{300};
constexpr std::chrono::seconds kCatalogRefresh{1};
// How often a load or unload asks the hubs whether its replicas came or left.
constexpr std::chrono::milliseconds kHubCheck{250};
// A loading version's replicas start this far apart: each one's start (loading, warming up) takes
// a core for tens of milliseconds, and all at once they would take every core from the versions
// serving (on 2 cores, a 150 ms stall of every request in flight).
constexpr std::chrono::milliseconds kReplicaStartGap{150};
// An unloaded version's replicas have this long to finish and exit before SIGKILL (they hold no
// request by then).
constexpr std::chrono::seconds kStopDrain{5};
// The hubs see a stopped replica leave at once (its connection drops) or after missed heartbeats;
// an unload waits that long at most for them (a hub that does not answer cannot say).
constexpr std::chrono::seconds kLeaveWait{30};

bool served(State s) {
  return s == State::kReady || s == State::kLoading;
}

}  // namespace

ModelLifecycle::ModelLifecycle(zmq::context_t& context, const config::PipelineConfig& config,
                               ChildProcesses& children, Replicas replicas)
    : context_(context),
      config_(config),
      children_(children),
      replicas_(std::move(replicas)),
      idle_starts_(service::can_leave_idle()) {}

void ModelLifecycle::started(const config::ModelRepository& repository) {
  for (const auto& m : repository.models) {
    versions_[config::model_key(m.name, m.version)] =
        Version{m, State::kLoading, "", /*routed=*/true, /*stopped=*/false, Clock::now()};
  }
}

void ModelLifecycle::on_request(const std::string& client,
                                const model_control::ControlRequest& request) {
  switch (request.op) {
    case model_control::Op::kIndex:
      replies_.emplace_back(client, index());
      return;
    case model_control::Op::kLoad:
      return load(client, request);
    case model_control::Op::kUnload:
      return unload(client, request);
  }
}

void ModelLifecycle::load(const std::string& client, const model_control::ControlRequest& request) {
  const config::ModelRepository repo = config::scan_repository(config_.model.repository);
  const config::ModelVersion* chosen = nullptr;
  for (const auto& m : repo.models) {  // by version: the last match is the highest
    if (m.name == request.name && (!request.version || m.version == *request.version)) chosen = &m;
  }
  if (!chosen) {
    std::string why = "model '" + request.name + "'" +
                      (request.version ? " version " + std::to_string(*request.version) : "") +
                      " is not in the repository " + config_.model.repository;
    const std::string dir = config_.model.repository + "/" + request.name;
    for (const auto& bad : repo.bad) {
      if (bad.path == dir || bad.path.starts_with(dir + "/"))
        why += "; " + bad.path + ": " + bad.reason;
    }
    return reply_error(client, protocol::ErrorCode::kNotFound, why);
  }
  const std::string key = config::model_key(chosen->name, chosen->version);
  auto it = versions_.find(key);
  if (it != versions_.end() && it->second.state == State::kUnloading) {
    return reply_error(client, protocol::ErrorCode::kUnavailable,
                       key + " is being unloaded; load it again once that is done");
  }
  if (it == versions_.end() || it->second.state == State::kUnavailable) {
    std::printf("seqpipe up: loading model %s from %s\n", key.c_str(), chosen->dir.c_str());
    std::fflush(stdout);
    versions_[key] =
        Version{*chosen, State::kLoading, "", /*routed=*/false, /*stopped=*/false, Clock::now()};
    std::vector<ChildSpec> replicas = replicas_(*chosen);
    for (ChildSpec& replica : replicas) replica.start_idle = idle_starts_;
    children_.add(std::move(replicas), kReplicaStartGap);
  }
  Pending pending{client, key, {}};
  for (const auto& [other, v] : versions_) {
    if (other != key && v.model.name == chosen->name && served(v.state))
      pending.unloads.push_back(other);
  }
  pending_.push_back(std::move(pending));
}

void ModelLifecycle::unload(const std::string& client,
                            const model_control::ControlRequest& request) {
  Pending pending{client, "", {}};
  for (const auto& [key, v] : versions_) {
    if (v.model.name == request.name && served(v.state) &&
        (!request.version || v.model.version == *request.version))
      pending.unloads.push_back(key);
  }
  if (pending.unloads.empty()) {
    return reply_error(client, protocol::ErrorCode::kNotFound,
                       "model '" + request.name + "'" +
                           (request.version ? " version " + std::to_string(*request.version) : "") +
                           " is not loaded");
  }
  for (const std::string& key : pending.unloads) start_unloading(key);
  pending_.push_back(std::move(pending));
}

void ModelLifecycle::start_unloading(const std::string& key) {
  Version& v = versions_.at(key);
  if (!served(v.state)) return;
  std::printf("seqpipe up: unloading model %s\n", key.c_str());
  std::fflush(stdout);
  v.state = State::kUnloading;
  v.routed = false;
  v.since = Clock::now();
  changed_ = true;
}

void ModelLifecycle::fail(const std::string& key, const std::string& reason) {
  const auto it = versions_.find(key);
  if (it == versions_.end()) return;
  Version& v = it->second;
  std::fprintf(stderr, "seqpipe up: model %s is not served: %s: %s\n", key.c_str(),
               v.model.dir.c_str(), reason.c_str());
  changed_ = changed_ || v.routed;
  v.state = State::kUnavailable;
  v.reason = v.model.dir + ": " + reason;
  v.routed = false;
  children_.stop_group(key, std::chrono::seconds(1));
}

void ModelLifecycle::given_up(const std::vector<GivenUp>& given_up) {
  for (const GivenUp& g : given_up) fail(g.group, g.reason);
}

void ModelLifecycle::tick(Clock::time_point now) {
  check_loads(now);
  finish_pending();  // a load that became ready starts unloading the versions it replaces
  push_catalog(now);
  check_unloads(now);
  finish_pending();
}

void ModelLifecycle::check_loads(Clock::time_point now) {
  std::vector<std::string> loading;
  for (const auto& [key, v] : versions_) {
    if (v.state != State::kLoading) continue;
    if (now - v.since > model_control::kLoadTimeout) {
      fail(key, "its replicas were not all ready within " +
                    std::to_string(model_control::kLoadTimeout.count()) + " s");
    } else {
      loading.push_back(key);
    }
  }
  if (loading.empty() || now - last_load_check_ < kHubCheck) return;
  last_load_check_ = now;
  const auto status =
      status::ask_pipeline(context_, config_, kAnswerWait, security::client_keys(config_.security));
  for (const std::string& key : loading) {
    if (!status.ready_for(key)) continue;
    Version& v = versions_.at(key);
    std::printf("seqpipe up: model %s is ready\n", key.c_str());
    std::fflush(stdout);
    v.state = State::kReady;
    changed_ = changed_ || !v.routed;
    v.routed = true;
  }
}

void ModelLifecycle::push_catalog(Clock::time_point now) {
  const bool unloading = std::any_of(versions_.begin(), versions_.end(), [](const auto& kv) {
    return kv.second.state == State::kUnloading && !kv.second.stopped;
  });
  if (!changed_ && !unloading && now - last_push_ < kCatalogRefresh) return;
  last_push_ = now;
  std::vector<config::ModelVersion> catalog;
  for (const auto& [key, v] : versions_)
    if (v.routed) catalog.push_back(v.model);
  model_control::InFlight in_flight;
  bool all_answered = true;
  for (int k = 0; k < config_.gateway.replicas; ++k) {
    const auto answer = model_control::send_catalog(
        context_, config::replica_endpoint(config_.gateway.tokenizer_endpoint, k), catalog,
        kAnswerWait, security::client_keys(config_.security));
    all_answered = all_answered && answer.has_value();
    for (const auto& [key, n] : answer.value_or(model_control::InFlight{})) in_flight[key] += n;
  }
  if (!all_answered) return;  // a gateway may still route to what is unloading: next round
  changed_ = false;
  for (auto& [key, v] : versions_) {
    if (v.state != State::kUnloading || v.stopped || in_flight[key] > 0) continue;
    children_.stop_group(key, kStopDrain);
    v.stopped = true;
    v.since = now;
  }
}

void ModelLifecycle::check_unloads(Clock::time_point now) {
  std::vector<std::string> stopped;
  for (const auto& [key, v] : versions_)
    if (v.state == State::kUnloading && v.stopped) stopped.push_back(key);
  if (stopped.empty() || now - last_unload_check_ < kHubCheck) return;
  last_unload_check_ = now;
  const auto status =
      status::ask_pipeline(context_, config_, kAnswerWait, security::client_keys(config_.security));
  const bool answered = std::all_of(status.hubs.begin(), status.hubs.end(),
                                    [](const auto& hub) { return hub.stages.has_value(); });
  for (const std::string& key : stopped) {
    Version& v = versions_.at(key);
    if ((!answered || status.has_replicas_of(key)) && now - v.since < kLeaveWait) continue;
    std::printf("seqpipe up: model %s unloaded\n", key.c_str());
    std::fflush(stdout);
    v.state = State::kUnavailable;
    v.reason = "unloaded";
    v.stopped = false;
  }
}

void ModelLifecycle::finish_pending() {
  std::vector<Pending> waiting;
  for (Pending& p : pending_) {
    if (!p.load.empty()) {
      const Version& v = versions_.at(p.load);
      if (v.state == State::kUnavailable) {
        reply_error(p.client, protocol::ErrorCode::kUnavailable,
                    "model " + p.load + " did not load: " + v.reason);
        continue;
      }
      if (v.state != State::kReady) {
        waiting.push_back(std::move(p));
        continue;
      }
      for (const std::string& key : p.unloads) start_unloading(key);
    }
    const bool done = std::all_of(p.unloads.begin(), p.unloads.end(), [&](const std::string& k) {
      return versions_.at(k).state == State::kUnavailable;
    });
    if (done)
      replies_.emplace_back(p.client, index());
    else
      waiting.push_back(std::move(p));
  }
  pending_ = std::move(waiting);
}

void ModelLifecycle::reply_error(const std::string& client, protocol::ErrorCode code,
                                 const std::string& why) {
  model_control::ControlReply reply = index();
  reply.error = protocol::Error{code, why};
  replies_.emplace_back(client, std::move(reply));
}

std::vector<std::pair<std::string, model_control::ControlReply>> ModelLifecycle::take_replies() {
  return std::exchange(replies_, {});
}

model_control::ControlReply ModelLifecycle::index() const {
  model_control::ControlReply reply;
  const config::ModelRepository repo = config::scan_repository(config_.model.repository);
  for (const auto& m : repo.models) {
    const auto it = versions_.find(config::model_key(m.name, m.version));
    if (it == versions_.end())
      reply.models.push_back({m.name, m.version, State::kUnavailable, "not loaded"});
  }
  for (const auto& [key, v] : versions_)
    reply.models.push_back({v.model.name, v.model.version, v.state, v.reason});
  const std::string prefix = config_.model.repository + "/";
  for (const auto& bad : repo.bad) {
    std::string name = bad.path.starts_with(prefix) ? bad.path.substr(prefix.size()) : bad.path;
    name = name.substr(0, name.find('/'));
    reply.models.push_back({name, 0, State::kUnavailable, bad.path + ": " + bad.reason});
  }
  std::sort(reply.models.begin(), reply.models.end(), [](const auto& a, const auto& b) {
    return std::tie(a.name, a.version) < std::tie(b.name, b.version);
  });
  return reply;
}

}  // namespace seqpipe::supervisor

namespace seqpipe::supervisor {

namespace {
// The poll's requests come from this client: no ZeroMQ routing id is empty.
const std::string kPollClient;
}  // namespace

bool supervise_models(zmq::context_t& context, const std::string& control_endpoint,
                      ChildProcesses& children, ModelLifecycle& lifecycle, RepositoryPoll& poll,
                      const std::function<bool()>& stop_requested) {
  transport::Socket control(context, zmq::socket_type::router, {});
  control.bind(control_endpoint);
  while (!stop_requested()) {
    // A DEALER's request: its routing id, the empty delimiter, the request.
    if (auto frames = control.recv(std::chrono::milliseconds(50)); frames && frames->size() == 3) {
      const std::string& client = frames->front();
      auto request = model_control::decode_request(frames->back());
      if (auto* why = std::get_if<std::string>(&request)) {
        model_control::ControlReply reply{
            protocol::Error{protocol::ErrorCode::kInvalidArgument, *why}, {}};
        control.send(transport::Frames{client, "", model_control::encode(reply)});
      } else {
        lifecycle.on_request(client, std::get<model_control::ControlRequest>(request));
      }
    }
    std::vector<GivenUp> given_up = children.step();
    if (std::any_of(given_up.begin(), given_up.end(),
                    [](const GivenUp& g) { return g.group.empty(); }))
      return true;
    lifecycle.given_up(given_up);
    const Clock::time_point now = Clock::now();
    if (poll.due(now)) {
      for (const auto& request : poll.poll(now, lifecycle.index()))
        lifecycle.on_request(kPollClient, request);
    }
    lifecycle.tick(now);
    for (const auto& [client, reply] : lifecycle.take_replies()) {
      if (client != kPollClient) {
        control.send(transport::Frames{client, "", model_control::encode(reply)});
      } else if (reply.error) {
        std::fprintf(stderr, "seqpipe up: repository poll: %s\n", reply.error->message.c_str());
      }
    }
  }
  return false;
}

}  // namespace seqpipe::supervisor
