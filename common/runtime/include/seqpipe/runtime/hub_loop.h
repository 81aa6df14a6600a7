#pragma once
// A hub (the gateway, the batcher): its own sockets and logic are a HubStage, which says what to
// poll and what to do when each is readable or a timer is due; run_hub() is the one loop both
// share, as run_worker() is the workers' (seqpipe/runtime/worker.h). The loop polls, reads the
// clocks once per round (Now::read()), reads the worker sockets (answering the status probe and
// the model catalog), sends the stage's Outbox in rounds (hub::send_rounds) and stops on
// service::stop_requested(). serve_hub() is a hub's whole main after the config is loaded.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/messages/clock.h"
#include "seqpipe/messages/stage_messages.h"
#include "seqpipe/observability/metrics.h"
#include "seqpipe/observability/status.h"
#include "seqpipe/runtime/outbox.h"
#include "seqpipe/security/security.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::hub {

class HubLoop;

// What a hub polls, in the order each round reads it: HubStage::watch() adds its sockets here.
class HubSockets {
 public:
  // A socket, or a file descriptor (an eventfd), the stage reads itself: when it is readable,
  // HubStage::on_readable() gets the id returned (0, 1, ... in the order added).
  size_t input(transport::Socket& socket);
  size_t input(int fd);
  // A ROUTER its workers connect to (`from`: "a tokenizer", for logs). The loop reads it: the
  // status probe and the model catalog are answered, malformed messages logged, counted and
  // dropped, and each other message goes to HubStage::on_worker(). Returns its link (0, 1, ...
  // in the order added): the Outbox's sends to that link go out over it.
  size_t workers(transport::Socket& socket, std::string from);

 private:
  friend class HubLoop;
  struct Watched {
    size_t poll_index = 0;
    size_t id = 0;  // the input's id, or the worker socket's link
    bool workers = false;
    std::string from;
  };
  transport::Poller poller_;
  std::vector<Watched> watched_;
  std::vector<transport::Socket*> worker_sockets_;  // by link
  size_t inputs_ = 0;
};

class HubStage {
 public:
  virtual ~HubStage() = default;
  // Once, before the first round: what to poll (HubSockets' input() and workers()).
  virtual void watch(HubSockets& sockets) = 0;
  // How long from now until the stage's next timer is due (a request's deadline, a batch's
  // wait); nullopt: none. The loop waits no longer for its sockets (nor longer than
  // HubOptions::max_wait).
  virtual std::optional<std::chrono::nanoseconds> until_next_timer() const = 0;
  // Input `input` (HubSockets::input()'s id) is readable: the stage reads what waits there.
  virtual void on_readable(size_t input, const Now& now, Outbox& out) = 0;
  // A message from `worker` on the worker socket of `link`.
  virtual void on_worker(size_t link, const std::string& worker, stage::StageMessage&& message,
                         const Now& now) = 0;
  // A model catalog message (model_control::kCatalogCommand) on a worker socket: the answer to
  // send back; nullopt (a hub that takes none): dropped unanswered.
  virtual std::optional<std::string> on_catalog(std::string_view /*bytes*/) { return std::nullopt; }
  // The status probe's answer: the stage's lines (its own first), and its own line's `about`.
  virtual std::vector<status::StageStatus> status() const = 0;
  virtual std::string about() const = 0;
  // Every round, after the inputs: whatever is due by `now` (heartbeats, deadlines).
  virtual void tick(const Now& now, Outbox& out) = 0;
  // Each send round: work to the workers with credit.
  virtual void dispatch(const Now& now, Outbox& out) = 0;
  // A send to `worker` on `link` failed (it left): it is dead, its work back in `out`.
  virtual void unreachable(size_t link, const std::string& worker, const Now& now, Outbox& out) = 0;
  // After the send rounds: what goes out over the stage's own sockets (the gateway's replies).
  virtual void send_own(Outbox& /*out*/) {}
  // The loop ended (a stop was requested): the stage logs what it leaves.
  virtual void stopped() {}
};

struct HubOptions {
  std::string name;  // "gateway", for logs
  // The longest a round waits for its sockets (a heartbeat interval, at most 100 ms: heartbeats
  // and the stop flag are looked at once per round).
  std::chrono::milliseconds max_wait{100};
  // When the hub started: the status probe's uptime.
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  stage::Limits limits{};  // on the worker sockets' messages
};

// Serves `stage` until service::stop_requested(). `pushes` carries the Outbox's pushes (to the
// endpoints named in them); `metrics` counts the malformed messages.
void run_hub(HubStage& stage, const HubOptions& options, transport::PushSockets& pushes,
             metrics::StageMetrics& metrics);

// What a hub's stage is built with in serve_hub().
struct HubContext {
  zmq::context_t& context;
  const security::HubSecurity& security;  // its sockets' keys
  metrics::Exporter& exporter;            // /metrics: its registry and port
  metrics::StageMetrics& metrics;

  // The options of a socket the hub binds: a CurveZMQ server with the hub's keys (plain text
  // without them).
  transport::SocketOptions bound_options() const {
    transport::SocketOptions options;
    options.curve = security.server();
    return options;
  }
};

// A hub's whole main after the config is loaded: logging and stop handlers, the /metrics exporter
// (on metrics.address, `metrics_port`), the ZeroMQ context and the hub's keys, the stage from
// `make_stage` (which binds its sockets: start-up errors throw), /ready answered ready (a hub
// never waits for its workers), then run_hub. Returns the exit code.
int serve_hub(std::string_view name, const config::PipelineConfig& config, int metrics_port,
              const std::function<std::unique_ptr<HubStage>(HubContext&)>& make_stage);

}  // namespace seqpipe::hub
