#include "seqpipe/runtime/worker.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

#include "seqpipe/runtime/liveness.h"
#include "seqpipe/runtime/service.h"
#include "seqpipe/security/security.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::worker {

std::optional<stage::StageMessage> decode_frames(const std::vector<std::string>& frames,
                                                 size_t expected_frames, std::string_view from,
                                                 const stage::Limits& limits,
                                                 metrics::StageMetrics& metrics) {
  if (frames.size() != expected_frames) {
    spdlog::warn("dropped a message of {} frames from {} (expected {})", frames.size(), from,
                 expected_frames);
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

int hub_share(int capacity, size_t hub, size_t hubs) {
  const auto n = static_cast<int>(hubs);
  return capacity / n + (static_cast<int>(hub) < capacity % n ? 1 : 0);
}

std::vector<std::string> hubs_or(const std::vector<std::string>& configured,
                                 const std::string& the_hub) {
  return configured.empty() ? std::vector<std::string>{the_hub} : configured;
}

int run_worker(WorkerStage& stage, const WorkerOptions& options, metrics::StageMetrics& metrics) {
  using Clock = std::chrono::steady_clock;
  const size_t hub_count = options.hub_endpoints.size();
  if (hub_count == 0)
    throw std::invalid_argument(options.stage_name + ": no hub endpoint to connect to");
  if (stage.capacity() < static_cast<int>(hub_count)) {
    throw std::invalid_argument(options.stage_name + ": capacity " +
                                std::to_string(stage.capacity()) + " cannot give each of " +
                                std::to_string(hub_count) + " hubs a credit");
  }
  zmq::context_t context(1);
  transport::SocketOptions hub_options;
  hub_options.max_message_bytes = static_cast<int64_t>(options.limits.max_message_bytes);
  hub_options.curve = options.curve;
  transport::SocketOptions push_options;
  push_options.curve = options.curve;
  transport::PushSockets pushers(context, push_options);

  struct Hub {
    std::string endpoint;
    std::string from;  // "the hub <endpoint>", for logs
    int share = 0;     // credits announced to it (its part of the stage's capacity)
    common::PeerLiveness liveness;
    // A fresh DEALER for every (re)connection: the hub sees a new routing id, so nothing it
    // believed about the old connection (credits, work in flight) carries over by mistake.
    std::unique_ptr<transport::Socket> socket;
    // Its connection dropped (the hub died or restarted): reconnect at once, not after the
    // missed heartbeats, so a restarted hub has its workers back within ZeroMQ's reconnect
    // interval. Only a connection the hub accepted: one that a hub refuses (a CurveZMQ key not
    // allowed) drops at once, and is left to the heartbeats' doubling pauses. Destroyed before
    // the socket.
    std::unique_ptr<transport::ConnectionWatch> watch;
    bool accepted = false;  // the hub accepted this connection (its handshake succeeded)
    std::optional<Clock::time_point> reconnect_at;  // set while waiting to reconnect
    std::vector<stage::StageMessage> pending;       // answers kept for the next connection
  };
  std::vector<Hub> hubs;
  hubs.reserve(hub_count);
  for (size_t i = 0; i < hub_count; ++i) {
    hubs.push_back({options.hub_endpoints[i],
                    "the hub " + options.hub_endpoints[i],
                    hub_share(stage.capacity(), i, hub_count),
                    common::PeerLiveness(options.heartbeat_interval, options.heartbeat_liveness,
                                         options.reconnect_max, Clock::now()),
                    nullptr,
                    nullptr,
                    false,
                    std::nullopt,
                    {}});
  }
  // The poller watches the connected hubs' sockets and their connection watches (poller index
  // 2k: hub polled[k]'s socket, 2k + 1: its watch); rebuilt when a socket is replaced.
  std::unique_ptr<transport::Poller> poller;
  std::vector<size_t> polled;
  auto rebuild_poller = [&] {
    poller = std::make_unique<transport::Poller>();
    polled.clear();
    for (size_t i = 0; i < hub_count; ++i) {
      if (hubs[i].socket) {
        poller->add(*hubs[i].socket);
        poller->add(hubs[i].watch->events());
        polled.push_back(i);
      }
    }
  };
  auto disconnect = [&](Hub& hub, Clock::time_point reconnect_at) {
    hub.watch.reset();
    hub.socket.reset();
    hub.reconnect_at = reconnect_at;
  };
  // Never blocks: a hub that refused this worker's CurveZMQ key leaves the socket without a
  // connection (the hub is then silent and the worker reconnects, as from a dead hub).
  auto send_to_hub = [](Hub& hub, const stage::StageMessage& message) {
    return hub.socket && hub.socket->send({std::string_view(stage::encode(message))}, true);
  };
  auto connect = [&](size_t i, int credits) {
    Hub& hub = hubs[i];
    hub.socket =
        std::make_unique<transport::Socket>(context, zmq::socket_type::dealer, hub_options);
    hub.watch = std::make_unique<transport::ConnectionWatch>(context, *hub.socket);
    hub.accepted = false;
    hub.socket->connect(hub.endpoint);
    send_to_hub(hub, stage::Ready{credits});
    hub.reconnect_at.reset();
    spdlog::info("{}: connected to {}, {} credits", options.stage_name, hub.endpoint, credits);
  };
  for (size_t i = 0; i < hub_count; ++i) connect(i, hubs[i].share);
  rebuild_poller();

  Outbox out;
  auto flush = [&] {
    for (auto& [i, peer, message] : out.sends) {
      Hub& hub = hubs[i < hub_count ? i : 0];
      if (!send_to_hub(hub, message))
        hub.pending.push_back(std::move(message));  // sent once reconnected
    }
    for (const auto& [endpoint, message] : out.pushes) {
      if (!pushers.send(endpoint, stage::encode(message))) {
        spdlog::warn("{}: could not send a '{}' message to '{}'; dropped", options.stage_name,
                     stage::kind_name(message), endpoint);
      }
    }
    out.clear();
  };
  auto handle = [&](size_t i, const transport::Frames& frames) {
    hubs[i].liveness.seen(
        Clock::now());  // anything from the hub, even malformed, shows it is alive
    auto message = decode_frames(frames, 1, hubs[i].from, options.limits, metrics);
    if (!message || std::holds_alternative<stage::Heartbeat>(*message)) return;
    out.hub = i;
    if (const auto* cancel = std::get_if<stage::Cancel>(&*message)) {
      stage.cancel(*cancel, out);
      return;
    }
    if (stage::kind(*message) != stage.accepts()) {
      spdlog::warn("{}: ignored a '{}' message from {}", options.stage_name,
                   stage::kind_name(*message), hubs[i].endpoint);
      metrics.malformed();
      return;
    }
    stage.handle(std::move(*message), out);
  };

  std::vector<size_t> dropped;  // per round: the hubs whose connection dropped
  while (!service::stop_requested()) {
    const auto now = Clock::now();
    dropped.clear();
    auto wait = stage.has_pending_work() ? std::chrono::milliseconds(0) : options.idle_poll;
    for (const Hub& hub : hubs) {
      wait =
          std::min(wait, hub.reconnect_at ? std::max(std::chrono::milliseconds(0),
                                                     std::chrono::ceil<std::chrono::milliseconds>(
                                                         *hub.reconnect_at - now))
                                          : hub.liveness.until_heartbeat(now));
    }
    if (poller->poll(wait) > 0) {
      for (size_t k = 0; k < polled.size(); ++k) {
        Hub& hub = hubs[polled[k]];
        // Everything already waiting joins before the next unit of work (continuous batching).
        if (poller->readable(2 * k)) {
          while (auto frames = hub.socket->try_recv()) handle(polled[k], *frames);
        }
        if (poller->readable(2 * k + 1)) {
          while (auto event = hub.watch->next()) {
            if (*event == transport::ConnectionWatch::Event::kConnected) hub.accepted = true;
            if (*event == transport::ConnectionWatch::Event::kDisconnected)
              dropped.push_back(polled[k]);
          }
        }
      }
    }
    if (stage.has_pending_work()) stage.work(out);
    flush();
    const auto after = Clock::now();
    bool sockets_changed = false;
    for (size_t i : dropped) {
      if (!hubs[i].socket || !hubs[i].accepted) continue;
      spdlog::warn("{}: the connection to {} dropped; reconnecting", options.stage_name,
                   hubs[i].endpoint);
      disconnect(hubs[i], after);
      sockets_changed = true;
    }
    for (size_t i = 0; i < hub_count; ++i) {
      Hub& hub = hubs[i];
      if (hub.reconnect_at) {
        if (after < *hub.reconnect_at) continue;
        // Its share minus what its work still holds (that returns with its results).
        connect(i, std::max(0, hub.share - stage.held(i)));
        hub.liveness.reconnected(after);
        std::erase_if(hub.pending, [&](const auto& message) { return send_to_hub(hub, message); });
        sockets_changed = true;
        continue;
      }
      if (hub.liveness.heartbeat_due(after)) {
        send_to_hub(hub, stage::Heartbeat{});
      }
      if (hub.liveness.hub_dead(after)) {
        const auto pause = hub.liveness.reconnect_pause();
        spdlog::warn("{}: no word from {} for {} heartbeats; reconnecting in {} ms",
                     options.stage_name, hub.endpoint, options.heartbeat_liveness, pause.count());
        // Work in hand goes on meanwhile (a decoder's running sequences); its answers wait in
        // `pending` for the new connection.
        disconnect(hub, after + pause);
        sockets_changed = true;
      }
    }
    if (sockets_changed) rebuild_poller();
  }
  spdlog::info("{}: stopping", options.stage_name);
  return 0;
}

int serve_worker(
    std::string_view stage_name, const std::string& metrics_address, int metrics_port,
    const std::vector<std::string>& hub_endpoints, const config::LivenessConfig& liveness,
    const config::SecurityConfig& security,
    const std::function<std::unique_ptr<WorkerStage>(metrics::StageMetrics&)>& make_stage) {
  service::init_logging(stage_name);
  service::install_stop_handlers();
  const transport::CurveKeys curve = security::client_keys(security);  // before the slow warm-up
  metrics::Exporter exporter(stage_name, metrics_port, metrics::kReplicaPortRange, metrics_address);
  metrics::StageMetrics stage_metrics(exporter.registry(), stage_name);
  spdlog::info("{}: metrics on :{}", stage_name, exporter.port());
  const std::unique_ptr<WorkerStage> stage = make_stage(stage_metrics);
  const auto warm_start = std::chrono::steady_clock::now();
  if (stage->warm_up()) {
    spdlog::info(
        "{}: warmed up in {:.1f} ms", stage_name,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm_start)
            .count());
  }
  WorkerOptions options;
  options.stage_name = std::string(stage_name);
  options.hub_endpoints = hub_endpoints;
  options.heartbeat_interval = std::chrono::milliseconds(liveness.heartbeat_interval_ms);
  options.heartbeat_liveness = liveness.heartbeat_liveness;
  options.reconnect_max = std::chrono::milliseconds(liveness.reconnect_max_ms);
  options.curve = curve;
  return run_worker(*stage, options, stage_metrics);
}

}  // namespace seqpipe::worker
