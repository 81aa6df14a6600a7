#include "seqpipe/common/worker.h"

#include <spdlog/spdlog.h>

#include <thread>


#include "seqpipe/common/liveness.h"
#include "seqpipe/common/service.h"
#include "seqpipe/common/transport.h"

namespace seqpipe::worker {

void Outbox::fail(stage::WorkItem item, protocol::Error error, std::string_view stage_name,
                  metrics::StageMetrics& metrics) {
  spdlog::warn("{}: request {} item {}: {}: {}", stage_name, item.request, item.index,
               protocol::wire_name(error.code), error.message);
  metrics.error(error.code);
  item.error = std::move(error);
  item.ids.clear();
  item.hidden.clear();
  item.rows = 0;
  std::string endpoint = item.gateway;
  pushes.emplace_back(std::move(endpoint), stage::StageMessage{stage::MessageKind::kResult, 0, {std::move(item)}});
}

void Outbox::results(std::vector<stage::WorkItem>&& items) {
  for (auto& item : items) {
    auto it = std::find_if(pushes.begin(), pushes.end(), [&](const auto& p) {
      return p.first == item.gateway && p.second.kind == stage::MessageKind::kResult;
    });
    if (it == pushes.end()) {
      pushes.emplace_back(item.gateway, stage::StageMessage{stage::MessageKind::kResult, 0, {}});
      it = pushes.end() - 1;
    }
    it->second.items.push_back(std::move(item));
  }
  items.clear();
}

std::optional<stage::StageMessage> decode_frames(const std::vector<std::string>& frames, size_t expected_frames,
                                                 std::string_view from, const stage::Limits& limits,
                                                 metrics::StageMetrics& metrics) {
  if (frames.size() != expected_frames) {
    spdlog::warn("dropped a message of {} frames from {} (expected {})", frames.size(), from, expected_frames);
    metrics.malformed();
    return std::nullopt;
  }
  auto decoded = stage::decode(frames.back(), limits);
  if (auto* error = std::get_if<protocol::Error>(&decoded)) {
    spdlog::warn("dropped a malformed message from {}: {}", from, error->message);
    metrics.malformed();
    return std::nullopt;
  }
  return std::move(std::get<stage::StageMessage>(decoded));
}


int run_worker(WorkerStage& stage, const WorkerOptions& options, metrics::StageMetrics& metrics) {
  using Clock = std::chrono::steady_clock;
  zmq::context_t context(1);
  transport::SocketOptions hub_options;
  hub_options.max_message_bytes = static_cast<int64_t>(options.limits.max_message_bytes);
  transport::PushSockets pushers(context);
  common::PeerLiveness hub_liveness(options.heartbeat_interval, options.heartbeat_liveness, options.reconnect_max,
                                    Clock::now());
  // A fresh DEALER for every (re)connection: the hub sees a new routing id, so nothing it
  // believed about the old connection (credits, work in flight) carries over by mistake.
  std::unique_ptr<transport::Socket> hub;
  auto connect = [&](int credits) {
    hub = std::make_unique<transport::Socket>(context, zmq::socket_type::dealer, hub_options);
    hub->connect(options.hub_endpoint);
    hub->send({std::string_view(stage::encode({stage::MessageKind::kReady, credits, {}}))});
    spdlog::info("{}: connected to {}, {} credits", options.stage_name, options.hub_endpoint, credits);
  };
  connect(stage.capacity());

  Outbox out;
  auto flush = [&] {
    for (const auto& message : out.to_hub) hub->send({std::string_view(stage::encode(message))});
    for (const auto& [endpoint, message] : out.pushes) {
      if (!pushers.send(endpoint, stage::encode(message))) {
        spdlog::warn("{}: could not send {} item(s) to '{}'; dropped", options.stage_name, message.items.size(),
                     endpoint);
      }
    }
    out.to_hub.clear();
    out.pushes.clear();
  };
  const std::string from = "the hub " + options.hub_endpoint;
  auto handle = [&](const transport::Frames& frames) {
    hub_liveness.seen(Clock::now());  // anything from the hub, even malformed, shows it is alive
    auto message = decode_frames(frames, 1, from, options.limits, metrics);
    if (!message || message->kind == stage::MessageKind::kHeartbeat) return;
    if (message->kind == stage::MessageKind::kCancel) {
      stage.cancel(*message, out);
      return;
    }
    if (message->kind != stage.accepts()) {
      spdlog::warn("{}: ignored a '{}' message from the hub", options.stage_name, stage::kind_name(message->kind));
      metrics.malformed();
      return;
    }
    stage.handle(std::move(*message), out);
  };

  while (!service::stop_requested()) {
    const auto now = Clock::now();
    const auto wait = stage.has_pending_work() ? std::chrono::milliseconds(0)
                                               : std::min(options.idle_poll, hub_liveness.until_heartbeat(now));
    if (auto frames = hub->recv(wait)) {
      handle(*frames);
      // Everything already waiting joins before the next unit of work (continuous batching).
      while (auto more = hub->try_recv()) handle(*more);
    }
    if (stage.has_pending_work()) stage.work(out);
    flush();
    const auto after = Clock::now();
    if (hub_liveness.heartbeat_due(after)) hub->send({std::string_view(stage::encode({stage::MessageKind::kHeartbeat, 0, {}}))});
    if (hub_liveness.hub_dead(after)) {
      const auto pause = hub_liveness.reconnect_pause();
      spdlog::warn("{}: no word from {} for {} heartbeats; reconnecting in {} ms", options.stage_name,
                   options.hub_endpoint, options.heartbeat_liveness, pause.count());
      const auto until = Clock::now() + pause;
      while (!service::stop_requested() && Clock::now() < until) {
        // Work in hand goes on meanwhile (a decoder's running sequences); its results are kept
        // for the new connection.
        if (stage.has_pending_work()) {
          stage.work(out);
          for (auto& [endpoint, message] : out.pushes) pushers.send(endpoint, stage::encode(message));
          out.pushes.clear();
        } else {
          std::this_thread::sleep_for(std::min(std::chrono::milliseconds(20), pause));
        }
      }
      connect(stage.free_capacity());
      hub_liveness.reconnected(Clock::now());
      flush();
    }
  }
  spdlog::info("{}: stopping", options.stage_name);
  return 0;
}

int serve_worker(std::string_view stage_name, int metrics_port, const std::string& hub_endpoint,
                 const config::LivenessConfig& liveness,
                 const std::function<std::unique_ptr<WorkerStage>(metrics::StageMetrics&)>& make_stage) {
  service::init_logging(stage_name);
  service::install_stop_handlers();
  metrics::Exporter exporter(stage_name, metrics_port, metrics::kReplicaPortRange);
  metrics::StageMetrics stage_metrics(exporter.registry(), stage_name);
  spdlog::info("{}: metrics on :{}", stage_name, exporter.port());
  const std::unique_ptr<WorkerStage> stage = make_stage(stage_metrics);
  const auto warm_start = std::chrono::steady_clock::now();
  if (stage->warm_up()) {
    spdlog::info("{}: warmed up in {:.1f} ms", stage_name,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm_start).count());
  }
  WorkerOptions options;
  options.stage_name = std::string(stage_name);
  options.hub_endpoint = hub_endpoint;
  options.heartbeat_interval = std::chrono::milliseconds(liveness.heartbeat_interval_ms);
  options.heartbeat_liveness = liveness.heartbeat_liveness;
  options.reconnect_max = std::chrono::milliseconds(liveness.reconnect_max_ms);
  return run_worker(*stage, options, stage_metrics);
}

}  // namespace seqpipe::worker
