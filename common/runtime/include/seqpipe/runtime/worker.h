#pragma once
// A worker replica (tokenizer, encoder, decoder, postprocessor): the stage logic is a
// socket-free WorkerStage that turns incoming messages into outgoing ones (an Outbox), so it is
// unit-tested by calling it; run_worker() is the one socket loop all four share. The worker
// connects a DEALER to its hub, announces its capacity (`ready{credits}`), and from then on the
// hub sends it no more than that: credit-based flow control as in the ZeroMQ guide's
// load-balancing broker. Results for a gateway go over PUSH sockets to the endpoint named in
// the item (`WorkHeader::gateway`). A worker may serve several hubs (several gateways, or several
// batchers): one DEALER, heartbeat and reconnection each, its capacity split between them, and
// every answer and credit back to the hub that sent the work.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "seqpipe/config/liveness_config.h"
#include "seqpipe/config/security_config.h"
#include "seqpipe/messages/stage_messages.h"
#include "seqpipe/observability/metrics.h"
#include "seqpipe/runtime/outbox.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::worker {

// Messages a stage produced (seqpipe/runtime/outbox.h); run_worker sends them and clears the
// outbox. `sends` go to the hubs (`link`: the hub's index in hub_endpoints), `pushes` over PUSH.
struct WorkerOutbox : seqpipe::Outbox {
  // The hub whose message the stage is handling (set by run_worker before handle() and
  // cancel()); a stage that answers later (the decoder) keeps it with the work.
  size_t hub = 0;
  // A message to the hub being handled (credits and results of the message at hand).
  void answer(stage::StageMessage message) { sends.push_back({hub, {}, std::move(message)}); }
};

// The stage message in the last of `frames`, which must number `expected_frames` (1 from a
// DEALER or PUSH, 2 on a ROUTER: routing id + payload); else nullopt, logged with `from` and
// counted as malformed. Hubs and workers read every internal message through it.
std::optional<stage::StageMessage> decode_frames(const std::vector<std::string>& frames,
                                                 size_t expected_frames, std::string_view from,
                                                 const stage::Limits& limits,
                                                 metrics::StageMetrics& metrics);

// The same for a message received as ZeroMQ holds it: `routing_frames` (0 from a DEALER, 1 on a
// ROUTER), the header, then the tensor frames, which become the items' TensorFrames without a
// copy. Hubs and workers read their links' messages through it.
std::optional<stage::StageMessage> decode_parts(transport::Parts&& parts, size_t routing_frames,
                                                std::string_view from, const stage::Limits& limits,
                                                metrics::StageMetrics& metrics);

// Sends `message` on `socket` after `peer` (a ROUTER's routing id; empty on a DEALER): its
// header, then its tensor frames in place (stage::append_frames). False as Socket::send.
bool send_message(transport::Socket& socket, std::string_view peer,
                  const stage::StageMessage& message, bool dontwait = false);

class WorkerStage {
 public:
  virtual ~WorkerStage() = default;
  // Credits announced to the hub on connect: work units this replica holds at once.
  virtual int capacity() const = 0;
  // Credits free now, announced when the worker reconnects to a hub (work it still holds
  // returns its credit with its result).
  virtual int free_capacity() const { return capacity(); }
  // Credits that work from hub `hub` still holds (a reconnecting worker announces its share of
  // the capacity minus these). Stages that hold nothing between messages hold none.
  virtual int held(size_t /*hub*/) const { return 0; }
  // The kind of work message this stage takes (run_worker drops any other, logged and counted).
  virtual stage::MessageKind accepts() const = 0;
  // One message of that kind from the hub (already validated by stage::decode).
  virtual void handle(stage::StageMessage&& message, WorkerOutbox& out) = 0;
  // A `cancel` from the hub: stop the work of these requests and return its credits. Stages
  // that hold no work between messages have nothing to stop.
  virtual void cancel(const stage::Cancel& /*message*/, WorkerOutbox& /*out*/) {}
  // Runs before the worker announces itself (warm-up batches), on the thread that will run the
  // stage's other calls; true when it did something.
  virtual bool warm_up() { return false; }
  // Work the stage does between messages (the decoder's steps); the loop then polls the socket
  // without waiting.
  virtual bool has_pending_work() const { return false; }
  virtual void work(WorkerOutbox& /*out*/) {}
};

struct WorkerOptions {
  std::string stage_name;  // "encoder", for logs
  std::vector<std::string>
      hub_endpoints;       // the hubs' ROUTERs this worker connects to (at least one)
  stage::Limits limits{};  // on incoming messages
  std::chrono::milliseconds idle_poll{100};  // how often an idle loop looks at the stop flag
  // Heartbeats with the hub (config `liveness`): sent every interval; the hub silent for
  // `liveness` intervals means reconnect (with doubling pauses up to reconnect_max) and
  // announce the free capacity again. A dropped connection (the hub died or restarted) means
  // the same at once.
  std::chrono::milliseconds heartbeat_interval{1000};
  int heartbeat_liveness = 3;
  std::chrono::milliseconds reconnect_max{8000};
  // CurveZMQ client keys of every socket to a hub and of the PUSH sockets to the gateways
  // (security::client_keys); empty: plain text.
  transport::CurveKeys curve;
  // The model version this replica serves ("name/version"), announced in its `ready`: the hub
  // gives it that version's work only.
  std::string model;
  // What the metrics port's /ready answers: ready once every hub accepted the connection and got
  // this replica's credit; not ready while it drains. Null: none kept.
  metrics::Readiness* readiness = nullptr;
  // On a stop request the replica drains: it withdraws its credit (a `ready` of 0 credits), ends
  // the work in hand and answers it, then leaves, so the hubs re-dispatch nothing. Past this long
  // it leaves anyway (what it still holds is then re-dispatched): under Kubernetes' default
  // 30 s grace period before SIGKILL.
  std::chrono::milliseconds drain_limit{25000};
};

// The share of `capacity` that hub `hub` of `hubs` gets: capacity / hubs, and one more for the
// first capacity % hubs hubs (so the shares add up to the capacity).
int hub_share(int capacity, size_t hub, size_t hubs);

// Warms the stage up, connects to every hub, announces each its share of the capacity, serves
// until service::stop_requested(), then drains (WorkerOptions::drain_limit). Every call to the
// stage but capacity() and accepts() is made on a thread of its own, so the socket loop
// (heartbeats, the hubs' messages) goes on while the stage computes. Malformed messages are logged,
// counted and dropped. Throws std::invalid_argument when the capacity cannot give every hub a
// credit. Returns the exit code.
int run_worker(WorkerStage& stage, const WorkerOptions& options, metrics::StageMetrics& metrics);

// The hubs a stage serves: `configured` (the stage's hub_endpoints), or the pipeline's one hub.
std::vector<std::string> hubs_or(const std::vector<std::string>& configured,
                                 const std::string& the_hub);

// A worker's whole main after the config is loaded: logging and stop handlers, the /metrics
// exporter (on `metrics_address`, first free port from `metrics_port`), the stage from `make_stage`
// (which loads the model: start-up errors throw), then run_worker announcing `model`.
int serve_worker(
    std::string_view stage_name, const std::string& metrics_address, int metrics_port,
    const std::vector<std::string>& hub_endpoints, const config::LivenessConfig& liveness,
    const config::SecurityConfig& security, const std::string& model,
    const std::function<std::unique_ptr<WorkerStage>(metrics::StageMetrics&)>& make_stage);

}  // namespace seqpipe::worker
