#include "seqpipe/model_supervision.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <variant>

#include "seqpipe/observability/status.h"
#include "seqpipe/runtime/model_control.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/security/security.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::supervisor {
namespace {

// How long a round waits for a hub's or gateway's answer.
constexpr std::chrono::milliseconds kAnswerWait{300};
// A loading version's replicas start this far apart: each one's start (loading, warming up) takes
// a core for tens of milliseconds, and all at once they would take every core from the versions
// serving (on 2 cores, a 150 ms stall of every request in flight).
constexpr std::chrono::milliseconds kReplicaStartGap{150};
// The poll's requests come from this client: no ZeroMQ routing id is empty.
const std::string kPollClient;

}  // namespace

PipelineWorld::PipelineWorld(zmq::context_t& context, const config::PipelineConfig& config,
                             ChildProcesses& children, Replicas replicas,
                             model_control::VersionConfig version_config)
    : context_(context),
      config_(config),
      children_(children),
      replicas_(std::move(replicas)),
      version_config_(std::move(version_config)),
      idle_starts_(service::can_leave_idle()) {}

config::ModelRepository PipelineWorld::scan() {
  return config::scan_repository(config_.model.repository);
}

const model_control::CatalogEntry& PipelineWorld::load_settings(const config::ModelVersion& m) {
  const model_control::CatalogEntry loaded{
      m, model_control::load_version_settings(version_config_, m)};
  return settings_.insert_or_assign(config::model_key(m.name, m.version), loaded).first->second;
}

void PipelineWorld::start_replicas(const config::ModelVersion& version) {
  // The config as the replicas about to start read it (a reload reads an edited one again).
  load_settings(version);
  std::vector<ChildSpec> replicas = replicas_(version);
  for (ChildSpec& replica : replicas) replica.start_idle = idle_starts_;
  children_.add(std::move(replicas), kReplicaStartGap);
}

void PipelineWorld::stop_replicas(const std::string& key, std::chrono::milliseconds drain) {
  children_.stop_group(key, drain);
}

control::HubView PipelineWorld::ask_hubs(const std::vector<std::string>& keys) {
  const auto status =
      status::ask_pipeline(context_, config_, kAnswerWait, security::client_keys(config_.security));
  control::HubView view;
  view.all_answered = std::all_of(status.hubs.begin(), status.hubs.end(),
                                  [](const auto& hub) { return hub.stages.has_value(); });
  for (const std::string& key : keys) {
    if (status.ready_for(key)) view.ready.insert(key);
    if (status.has_replicas_of(key)) view.present.insert(key);
  }
  return view;
}

std::vector<model_control::CatalogEntry> PipelineWorld::with_settings(
    const std::vector<config::ModelVersion>& catalog) {
  std::vector<model_control::CatalogEntry> entries;
  for (const config::ModelVersion& m : catalog) {
    const auto known = settings_.find(config::model_key(m.name, m.version));
    entries.push_back(known != settings_.end() && known->second.model == m ? known->second
                                                                           : load_settings(m));
  }
  return entries;
}

std::optional<model_control::InFlight> PipelineWorld::send_catalog(
    const std::vector<config::ModelVersion>& versions) {
  const std::vector<model_control::CatalogEntry> catalog = with_settings(versions);
  model_control::InFlight in_flight;
  bool all_answered = true;
  for (int k = 0; k < config_.gateway.replicas; ++k) {
    const auto answer = model_control::send_catalog(
        context_, config::replica_endpoint(config_.gateway.tokenizer_endpoint, k), catalog,
        kAnswerWait, security::client_keys(config_.security));
    all_answered = all_answered && answer.has_value();
    for (const auto& [key, n] : answer.value_or(model_control::InFlight{})) in_flight[key] += n;
  }
  if (!all_answered) return std::nullopt;
  return in_flight;
}

namespace {

// A control request from `control`, if one came within the wait: to the lifecycle, or answered
// at once with what is wrong with it.
void serve_request(transport::Socket& control, control::ModelLifecycle& lifecycle,
                   Clock::time_point now) {
  // A DEALER's request: its routing id, the empty delimiter, the request.
  auto frames = control.recv(std::chrono::milliseconds(50));
  if (!frames || frames->size() != 3) return;
  const std::string& client = frames->front();
  auto request = model_control::decode_request(frames->back());
  if (auto* why = std::get_if<std::string>(&request)) {
    model_control::ControlReply reply{protocol::Error{protocol::ErrorCode::kInvalidArgument, *why},
                                      {}};
    control.send(transport::Frames{client, "", model_control::encode(reply)});
  } else {
    lifecycle.on_request(client, std::get<model_control::ControlRequest>(request), now);
  }
}

}  // namespace

bool supervise_models(zmq::context_t& context, const std::string& control_endpoint,
                      ChildProcesses& children, control::ModelLifecycle& lifecycle,
                      control::RepositoryPoll& poll, const std::function<bool()>& stop_requested) {
  transport::Socket control(context, zmq::socket_type::router, {});
  control.bind(control_endpoint);
  while (!stop_requested()) {
    serve_request(control, lifecycle, Clock::now());
    const std::vector<GivenUp> given_up = children.step();
    if (std::any_of(given_up.begin(), given_up.end(),
                    [](const GivenUp& g) { return g.group.empty(); }))
      return true;
    for (const GivenUp& g : given_up) lifecycle.given_up(g.group, g.reason);
    const Clock::time_point now = Clock::now();
    if (poll.due(now)) {
      for (const auto& request : poll.poll(now, lifecycle.index()))
        lifecycle.on_request(kPollClient, request, now);
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
