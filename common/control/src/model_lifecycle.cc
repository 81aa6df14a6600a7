#include "seqpipe/control/model_lifecycle.h"

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <utility>

namespace seqpipe::control {
namespace {

using model_control::State;

bool served(State s) {
  return s == State::kReady || s == State::kLoading;
}

}  // namespace

ModelLifecycle::ModelLifecycle(std::string repository, World& world)
    : repository_(std::move(repository)), world_(world) {}

void ModelLifecycle::started(const config::ModelRepository& repository, Clock::time_point now) {
  for (const auto& m : repository.models) {
    versions_[config::model_key(m.name, m.version)] =
        Version{m, State::kLoading, "", /*routed=*/true, /*stopped=*/false, now};
  }
}

void ModelLifecycle::on_request(const std::string& client,
                                const model_control::ControlRequest& request,
                                Clock::time_point now) {
  switch (request.op) {
    case model_control::Op::kIndex:
      replies_.emplace_back(client, index());
      return;
    case model_control::Op::kLoad:
      return load(client, request, now);
    case model_control::Op::kUnload:
      return unload(client, request, now);
  }
}

void ModelLifecycle::load(const std::string& client, const model_control::ControlRequest& request,
                          Clock::time_point now) {
  const config::ModelRepository repo = world_.scan();
  const config::ModelVersion* chosen = nullptr;
  for (const auto& m : repo.models) {  // by version: the last match is the highest
    if (m.name == request.name && (!request.version || m.version == *request.version)) chosen = &m;
  }
  if (!chosen) {
    std::string why = "model '" + request.name + "'" +
                      (request.version ? " version " + std::to_string(*request.version) : "") +
                      " is not in the repository " + repository_;
    const std::string dir = repository_ + "/" + request.name;
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
        Version{*chosen, State::kLoading, "", /*routed=*/false, /*stopped=*/false, now};
    world_.start_replicas(*chosen);
  }
  Pending pending{client, key, {}};
  for (const auto& [other, v] : versions_) {
    if (other != key && v.model.name == chosen->name && served(v.state))
      pending.unloads.push_back(other);
  }
  pending_.push_back(std::move(pending));
}

void ModelLifecycle::unload(const std::string& client, const model_control::ControlRequest& request,
                            Clock::time_point now) {
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
  for (const std::string& key : pending.unloads) start_unloading(key, now);
  pending_.push_back(std::move(pending));
}

void ModelLifecycle::start_unloading(const std::string& key, Clock::time_point now) {
  Version& v = versions_.at(key);
  if (!served(v.state)) return;
  std::printf("seqpipe up: unloading model %s\n", key.c_str());
  std::fflush(stdout);
  v.state = State::kUnloading;
  v.routed = false;
  v.since = now;
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
  world_.stop_replicas(key, kFailedStopDrain);
}

void ModelLifecycle::given_up(const std::string& key, const std::string& reason) {
  fail(key, reason);
}

void ModelLifecycle::tick(Clock::time_point now) {
  check_loads(now);
  finish_pending(now);  // a load that became ready starts unloading the versions it replaces
  push_catalog(now);
  check_unloads(now);
  finish_pending(now);
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
  const HubView hubs = world_.ask_hubs(loading);
  for (const std::string& key : loading) {
    if (!hubs.ready.contains(key)) continue;
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
  std::optional<model_control::InFlight> in_flight = world_.send_catalog(catalog);
  if (!in_flight) return;  // a gateway may still route to what is unloading: next round
  changed_ = false;
  for (auto& [key, v] : versions_) {
    if (v.state != State::kUnloading || v.stopped || (*in_flight)[key] > 0) continue;
    world_.stop_replicas(key, kStopDrain);
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
  const HubView hubs = world_.ask_hubs(stopped);
  for (const std::string& key : stopped) {
    Version& v = versions_.at(key);
    if ((!hubs.all_answered || hubs.present.contains(key)) && now - v.since < kLeaveWait) continue;
    std::printf("seqpipe up: model %s unloaded\n", key.c_str());
    std::fflush(stdout);
    v.state = State::kUnavailable;
    v.reason = "unloaded";
    v.stopped = false;
  }
}

void ModelLifecycle::finish_pending(Clock::time_point now) {
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
      for (const std::string& key : p.unloads) start_unloading(key, now);
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
  const config::ModelRepository repo = world_.scan();
  for (const auto& m : repo.models) {
    const auto it = versions_.find(config::model_key(m.name, m.version));
    if (it == versions_.end())
      reply.models.push_back({m.name, m.version, State::kUnavailable, "not loaded"});
  }
  for (const auto& [key, v] : versions_)
    reply.models.push_back({v.model.name, v.model.version, v.state, v.reason});
  const std::string prefix = repository_ + "/";
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

}  // namespace seqpipe::control
