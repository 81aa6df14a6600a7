#include "seqpipe/runtime/worker.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <thread>

#include "seqpipe/runtime/liveness.h"
#include "seqpipe/runtime/service.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/security/security.h"
#include "seqpipe/transport/transport.h"
#include "stage_runner.h"

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

std::optional<stage::StageMessage> decode_parts(transport::Parts&& parts, size_t routing_frames,
                                                std::string_view from, const stage::Limits& limits,
                                                metrics::StageMetrics& metrics) {
  if (parts.size() <= routing_frames) {
    spdlog::warn("dropped a message of {} frames from {} (expected at least {})", parts.size(),
                 from, routing_frames + 1);
    metrics.malformed();
    return std::nullopt;
  }
  std::vector<stage::TensorFrame> tensors;
  tensors.reserve(parts.size() - routing_frames - 1);
  for (size_t k = routing_frames + 1; k < parts.size(); ++k) {
    auto held = std::make_shared<zmq::message_t>(std::move(parts[k]));
    const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(held->data()), held->size());
    tensors.emplace_back(std::shared_ptr<const void>(held, held->data()), bytes);
  }
  auto decoded = stage::decode(parts[routing_frames].to_string_view(), tensors, limits);
  if (auto* error = std::get_if<protocol::Error>(&decoded)) {
    spdlog::warn("dropped a malformed message from {}: {}", from, error->message);
    metrics.malformed();
    return std::nullopt;
  }
  return std::move(std::get<stage::StageMessage>(decoded));
}

bool send_message(transport::Socket& socket, std::string_view peer,
                  const stage::StageMessage& message, bool dontwait) {
  const std::string header = stage::encode(message);
  std::vector<stage::TensorFrame> tensors;
  stage::append_frames(message, tensors);
  if (tensors.empty()) {
    return peer.empty() ? socket.send({std::string_view(header)}, dontwait)
                        : socket.send({peer, std::string_view(header)}, dontwait);
  }
  std::vector<transport::SharedFrame> tail;
  tail.reserve(tensors.size());
  for (const auto& t : tensors) tail.push_back({t.bytes(), t.owner()});
  return peer.empty() ? socket.send_shared({std::string_view(header)}, tail, dontwait)
                      : socket.send_shared({peer, std::string_view(header)}, tail, dontwait);
}

int hub_share(int capacity, size_t hub, size_t hubs) {
  const auto n = static_cast<int>(hubs);
  return capacity / n + (static_cast<int>(hub) < capacity % n ? 1 : 0);
}

std::vector<std::string> hubs_or(const std::vector<std::string>& configured,
                                 const std::string& the_hub) {
  return configured.empty() ? std::vector<std::string>{the_hub} : configured;
}

namespace {

// One hub this worker serves: its connection, liveness and the answers waiting for it.
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
  // This connection's Ready went out. A reconnection's Ready comes from the stage's thread
  // after the work in hand (its credits depend on that work); until then the hub knows nothing
  // of the connection: no heartbeats either way, and answers wait in `pending`.
  bool announced = false;
  int readies_asked = 0;  // Readies asked of the stage's thread and not back yet
  std::optional<SteadyClock::time_point> reconnect_at;  // set while waiting to reconnect
  std::vector<stage::StageMessage> pending;             // answers kept for the next connection
};

// run_worker's state and the steps of its loop: poll, pass messages to the stage's thread,
// collect and send what it produced, tend the hubs. The loop never waits for the stage: its
// heartbeats and the hubs' messages go on while the engine computes a batch.
class WorkerLoop {
 public:
  WorkerLoop(WorkerStage& stage, const WorkerOptions& options, metrics::StageMetrics& metrics)
      : accepts_(stage.accepts()),
        options_(options),
        metrics_(metrics),
        context_(1),
        pushers_(context_, push_options(options)),
        runner_(stage, context_, options.model) {
    hub_options_.max_message_bytes = static_cast<int64_t>(options.limits.max_message_bytes);
    hub_options_.curve = options.curve;
    const size_t count = options.hub_endpoints.size();
    hubs_.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      hubs_.push_back({options.hub_endpoints[i],
                       "the hub " + options.hub_endpoints[i],
                       hub_share(stage.capacity(), i, count),
                       common::PeerLiveness(options.heartbeat_interval, options.heartbeat_liveness,
                                            options.reconnect_max, SteadyClock::now()),
                       nullptr,
                       nullptr,
                       false,
                       false,
                       0,
                       std::nullopt,
                       {}});
    }
  }

  int run() {
    const auto warm_start = SteadyClock::now();
    if (runner_.warmed_up()) {
      spdlog::info(
          "{}: warmed up in {:.1f} ms", options_.stage_name,
          std::chrono::duration<double, std::milli>(SteadyClock::now() - warm_start).count());
    }
    service::leave_idle_start();  // warm: it serves at the priority of the others
    for (size_t i = 0; i < hubs_.size(); ++i) {
      connect(i);
      announce(hubs_[i], stage::Ready{hubs_[i].share, options_.model}, SteadyClock::now());
    }
    rebuild_poller();
    std::vector<size_t> dropped;  // per round: the hubs whose connection dropped
    while (!service::stop_requested()) {
      dropped.clear();
      if (poller_->poll(poll_wait(SteadyClock::now())) > 0) receive(dropped);
      if (poller_->readable(0)) runner_.collect(out_);
      flush();
      if (tend_hubs(SteadyClock::now(), dropped)) rebuild_poller();
    }
    // 0 credits tell each hub this replica leaves on purpose (an unload, a shutdown): no "dead"
    // warning there, and no more work sent here meanwhile.
    // Up to 100 ms for it to leave: the sockets drop what is unsent on close otherwise.
    for (Hub& hub : hubs_) {
      if (!hub.socket || !hub.announced) continue;
      hub.socket->raw().set(zmq::sockopt::linger, 100);
      send_to_hub(hub, stage::Ready{0, options_.model});
    }
    spdlog::info("{}: stopping", options_.stage_name);
    return 0;
  }

 private:
  static transport::SocketOptions push_options(const WorkerOptions& options) {
    transport::SocketOptions push;
    push.curve = options.curve;
    return push;
  }

  // Until the next heartbeat or reconnection is due.
  std::chrono::milliseconds poll_wait(SteadyClock::time_point now) const {
    auto wait = options_.idle_poll;
    for (const Hub& hub : hubs_) {
      if (hub.reconnect_at) {
        wait = std::min(
            wait, std::max(std::chrono::milliseconds(0),
                           std::chrono::ceil<std::chrono::milliseconds>(*hub.reconnect_at - now)));
      } else if (hub.announced) {
        wait = std::min(wait, hub.liveness.until_heartbeat(now));
      }
    }
    return wait;
  }

  // The poller watches the stage thread's signal (poller index 0), the connected hubs' sockets
  // and their connection watches (1 + 2k: hub polled[k]'s socket, 2 + 2k: its watch); rebuilt
  // when a socket is replaced.
  void rebuild_poller() {
    poller_ = std::make_unique<transport::Poller>();
    poller_->add(runner_.signal());
    polled_.clear();
    for (size_t i = 0; i < hubs_.size(); ++i) {
      if (hubs_[i].socket) {
        poller_->add(*hubs_[i].socket);
        poller_->add(hubs_[i].watch->events());
        polled_.push_back(i);
      }
    }
  }

  static void disconnect(Hub& hub, SteadyClock::time_point reconnect_at) {
    hub.watch.reset();
    hub.socket.reset();
    hub.reconnect_at = reconnect_at;
  }

  // Never blocks: a hub that refused this worker's CurveZMQ key leaves the socket without a
  // connection (the hub is then silent and the worker reconnects, as from a dead hub).
  static bool send_to_hub(Hub& hub, const stage::StageMessage& message) {
    return hub.socket && send_message(*hub.socket, {}, message, true);
  }

  void connect(size_t i) {
    Hub& hub = hubs_[i];
    hub.socket =
        std::make_unique<transport::Socket>(context_, zmq::socket_type::dealer, hub_options_);
    hub.watch = std::make_unique<transport::ConnectionWatch>(context_, *hub.socket);
    hub.accepted = false;
    hub.announced = false;
    hub.socket->connect(hub.endpoint);
    hub.reconnect_at.reset();
  }

  // Sends the connection's Ready, then the answers kept for it; the hub's silence counts from
  // now.
  void announce(Hub& hub, const stage::StageMessage& ready, SteadyClock::time_point now) {
    send_to_hub(hub, ready);
    hub.announced = true;
    hub.liveness.reconnected(now);
    std::erase_if(hub.pending, [&](const auto& message) { return send_to_hub(hub, message); });
    spdlog::info("{}: connected to {}, {} credits", options_.stage_name, hub.endpoint,
                 std::get<stage::Ready>(ready).credits);
  }

  // A Ready from the stage's thread: sent when it answers the latest ask and the connection it
  // was asked for is still there (else a newer one is coming, or the next connection asks).
  void ready_from_stage(Hub& hub, const stage::StageMessage& ready) {
    if (--hub.readies_asked > 0 || !hub.socket || hub.announced) return;
    announce(hub, ready, SteadyClock::now());
  }

  // What the poller found: messages (everything already waiting joins before the next unit of
  // work: continuous batching) and connection events.
  void receive(std::vector<size_t>& dropped) {
    for (size_t k = 0; k < polled_.size(); ++k) {
      Hub& hub = hubs_[polled_[k]];
      if (poller_->readable(1 + 2 * k)) {
        while (auto parts = hub.socket->try_recv_parts()) handle(polled_[k], std::move(*parts));
      }
      if (poller_->readable(2 + 2 * k)) {
        while (auto event = hub.watch->next()) {
          if (*event == transport::ConnectionWatch::Event::kConnected) hub.accepted = true;
          if (*event == transport::ConnectionWatch::Event::kDisconnected)
            dropped.push_back(polled_[k]);
        }
      }
    }
  }

  void handle(size_t i, transport::Parts&& parts) {
    // Anything from the hub, even malformed, shows it is alive.
    hubs_[i].liveness.seen(SteadyClock::now());
    auto message = decode_parts(std::move(parts), 0, hubs_[i].from, options_.limits, metrics_);
    if (!message || std::holds_alternative<stage::Heartbeat>(*message)) return;
    if (!std::holds_alternative<stage::Cancel>(*message) && stage::kind(*message) != accepts_) {
      spdlog::warn("{}: ignored a '{}' message from {}", options_.stage_name,
                   stage::kind_name(*message), hubs_[i].endpoint);
      metrics_.malformed();
      return;
    }
    runner_.post(i, std::move(*message));
  }

  // Pushes first: they carry the work on (a tokenizer's sequences, a postprocessor's results),
  // while a tokenizer's or postprocessor's answer to its hub is only a credit. Each send wakes a
  // ZeroMQ I/O thread, which on a busy machine can take the core from this one: the credit sent
  // first made every request wait for it (0.05-0.13 ms a stage on the 2-core VM).
  void flush() {
    for (const auto& [endpoint, message] : out_.pushes) {
      if (!pushers_.send(endpoint, stage::encode(message))) {
        spdlog::warn("{}: could not send a '{}' message to '{}'; dropped", options_.stage_name,
                     stage::kind_name(message), endpoint);
      }
    }
    for (auto& [i, peer, message] : out_.sends) {
      Hub& hub = hubs_[i < hubs_.size() ? i : 0];
      if (std::holds_alternative<stage::Ready>(message)) {
        ready_from_stage(hub, message);
      } else if (!hub.announced || !send_to_hub(hub, message)) {
        hub.pending.push_back(std::move(message));  // sent once reconnected
      }
    }
    out_.clear();
  }

  // Drops the connections that dropped, reconnects those due, sends heartbeats, gives up on
  // silent hubs. True when a socket changed (the poller is then rebuilt).
  bool tend_hubs(SteadyClock::time_point after, const std::vector<size_t>& dropped) {
    bool sockets_changed = false;
    for (size_t i : dropped) {
      if (!hubs_[i].socket || !hubs_[i].accepted) continue;
      spdlog::warn("{}: the connection to {} dropped; reconnecting", options_.stage_name,
                   hubs_[i].endpoint);
      disconnect(hubs_[i], after);
      sockets_changed = true;
    }
    for (size_t i = 0; i < hubs_.size(); ++i) {
      Hub& hub = hubs_[i];
      if (hub.reconnect_at) {
        if (after < *hub.reconnect_at) continue;
        // Its share minus what its work still holds (that returns with its results).
        connect(i);
        ++hub.readies_asked;
        runner_.ask_ready(i, hub.share);
        sockets_changed = true;
        continue;
      }
      if (!hub.socket || !hub.announced) continue;
      if (hub.liveness.heartbeat_due(after)) send_to_hub(hub, stage::Heartbeat{});
      if (hub.liveness.hub_dead(after)) {
        const auto pause = hub.liveness.reconnect_pause();
        spdlog::warn("{}: no word from {} for {} heartbeats; reconnecting in {} ms",
                     options_.stage_name, hub.endpoint, options_.heartbeat_liveness, pause.count());
        // Work in hand goes on meanwhile (a decoder's running sequences); its answers wait in
        // `pending` for the new connection.
        disconnect(hub, after + pause);
        sockets_changed = true;
      }
    }
    return sockets_changed;
  }

  const stage::MessageKind accepts_;
  const WorkerOptions& options_;
  metrics::StageMetrics& metrics_;
  zmq::context_t context_;
  transport::SocketOptions hub_options_;
  transport::PushSockets pushers_;
  std::vector<Hub> hubs_;
  std::unique_ptr<transport::Poller> poller_;
  std::vector<size_t> polled_;
  WorkerOutbox out_;
  StageRunner runner_;  // last: its thread stops first
};

// Makes the stage (which loads its model) on a thread of its own that ends before serving.
// Loading runs OpenMP regions, and libgomp keeps a pool of threads for every thread that started
// one, for that thread's life; once a process's pools hold more threads than it has cores,
// libgomp cuts every thread's spin-wait short (its "throttled" spin count). A pool left on the
// main thread beside the one of StageRunner's thread, where the stage computes, would do that
// for the process's life, and GOMP_SPINCOUNT would be ignored.
std::unique_ptr<WorkerStage> make_stage_on_passing_thread(
    const std::function<std::unique_ptr<WorkerStage>(metrics::StageMetrics&)>& make_stage,
    metrics::StageMetrics& metrics) {
  std::unique_ptr<WorkerStage> stage;
  std::exception_ptr failure;
  std::thread([&] {
    try {
      stage = make_stage(metrics);
    } catch (...) {
      failure = std::current_exception();
    }
  }).join();
  if (failure) std::rethrow_exception(failure);
  return stage;
}

}  // namespace

int run_worker(WorkerStage& stage, const WorkerOptions& options, metrics::StageMetrics& metrics) {
  const size_t hub_count = options.hub_endpoints.size();
  if (hub_count == 0)
    throw std::invalid_argument(options.stage_name + ": no hub endpoint to connect to");
  if (stage.capacity() < static_cast<int>(hub_count)) {
    throw std::invalid_argument(options.stage_name + ": capacity " +
                                std::to_string(stage.capacity()) + " cannot give each of " +
                                std::to_string(hub_count) + " hubs a credit");
  }
  return WorkerLoop(stage, options, metrics).run();
}

int serve_worker(
    std::string_view stage_name, const std::string& metrics_address, int metrics_port,
    const std::vector<std::string>& hub_endpoints, const config::LivenessConfig& liveness,
    const config::SecurityConfig& security, const std::string& model,
    const std::function<std::unique_ptr<WorkerStage>(metrics::StageMetrics&)>& make_stage) {
  service::init_logging(stage_name);
  service::install_stop_handlers();
  const transport::CurveKeys curve = security::client_keys(security);  // before the slow warm-up
  metrics::Exporter exporter(stage_name, metrics_port, metrics::kReplicaPortRange, metrics_address);
  metrics::StageMetrics stage_metrics(exporter.registry(), stage_name,
                                      metrics::model_labels(model));
  spdlog::info("{}: metrics on :{}", stage_name, exporter.port());
  const std::unique_ptr<WorkerStage> stage =
      make_stage_on_passing_thread(make_stage, stage_metrics);
  WorkerOptions options;
  options.stage_name = std::string(stage_name);
  options.hub_endpoints = hub_endpoints;
  options.heartbeat_interval = std::chrono::milliseconds(liveness.heartbeat_interval_ms);
  options.heartbeat_liveness = liveness.heartbeat_liveness;
  options.reconnect_max = std::chrono::milliseconds(liveness.reconnect_max_ms);
  options.curve = curve;
  options.model = model;
  spdlog::info("{}: serving model {}", stage_name, model);
  return run_worker(*stage, options, stage_metrics);
}

}  // namespace seqpipe::worker
