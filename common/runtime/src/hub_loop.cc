#include "seqpipe/runtime/hub_loop.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "seqpipe/config/liveness_config.h"
#include "seqpipe/config/metrics_config.h"
#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/config/security_config.h"
#include "seqpipe/runtime/hub.h"
#include "seqpipe/runtime/service.h"

namespace seqpipe::hub {

size_t HubSockets::input(transport::Socket& socket) {
  watched_.push_back({poller_.add(socket), inputs_, false, {}});
  return inputs_++;
}

size_t HubSockets::input(int fd) {
  watched_.push_back({poller_.add(fd), inputs_, false, {}});
  return inputs_++;
}

size_t HubSockets::workers(transport::Socket& socket, std::string from) {
  watched_.push_back({poller_.add(socket), worker_sockets_.size(), true, std::move(from)});
  worker_sockets_.push_back(&socket);
  return worker_sockets_.size() - 1;
}

// run_hub's rounds. The callbacks handed to read_workers and send_rounds are made once and read
// the round's clocks through `now_`: a round makes none of them anew.
class HubLoop {
 public:
  HubLoop(HubStage& stage, const HubOptions& options, transport::PushSockets& pushes,
          metrics::StageMetrics& metrics)
      : stage_(stage), options_(options), pushes_(pushes), metrics_(metrics) {
    stage_.watch(sockets_);
    status_ = [this] {
      return status::with_uptime(stage_.status(), options_.started, stage_.about());
    };
    for (size_t link = 0; link < sockets_.worker_sockets_.size(); ++link) {
      on_worker_.push_back([this, link](const std::string& worker, stage::StageMessage&& m) {
        stage_.on_worker(link, worker, std::move(m), now_);
      });
    }
    catalog_ = [this](std::string_view bytes) { return stage_.on_catalog(bytes); };
    dispatch_ = [this](Outbox& out) { stage_.dispatch(now_, out); };
    unreachable_ = [this](size_t link, const std::string& worker, Outbox& out) {
      stage_.unreachable(link, worker, now_, out);
    };
  }

  void run() {
    while (!service::stop_requested()) round();
    stage_.stopped();
  }

 private:
  // How long a round may wait: max_wait, less when the stage's next timer comes first.
  std::chrono::milliseconds wait() const {
    auto timeout = options_.max_wait;
    if (const auto until = stage_.until_next_timer()) {
      timeout = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(*until),
                           std::chrono::milliseconds(0), timeout);
    }
    return timeout;
  }

  void round() {
    sockets_.poller_.poll(wait());
    now_ = Now::read();  // the one reading of the clocks per round
    for (const HubSockets::Watched& w : sockets_.watched_) {
      if (!sockets_.poller_.readable(w.poll_index)) continue;
      if (!w.workers) {
        stage_.on_readable(w.id, now_, out_);
        continue;
      }
      read_workers(*sockets_.worker_sockets_[w.id], w.from, options_.limits, metrics_, status_,
                   on_worker_[w.id], catalog_);
    }
    stage_.tick(now_, out_);
    send_rounds(out_, sockets_.worker_sockets_, pushes_, options_.name, dispatch_, unreachable_);
    stage_.send_own(out_);
    out_.clear();
  }

  HubStage& stage_;
  const HubOptions& options_;
  transport::PushSockets& pushes_;
  metrics::StageMetrics& metrics_;
  HubSockets sockets_;
  Now now_;
  Outbox out_;
  std::function<std::vector<status::StageStatus>()> status_;
  std::vector<std::function<void(const std::string&, stage::StageMessage&&)>>
      on_worker_;  // by link
  std::function<std::optional<std::string>(std::string_view)> catalog_;
  std::function<void(Outbox&)> dispatch_;
  std::function<void(size_t, const std::string&, Outbox&)> unreachable_;
};

void run_hub(HubStage& stage, const HubOptions& options, transport::PushSockets& pushes,
             metrics::StageMetrics& metrics) {
  HubLoop(stage, options, pushes, metrics).run();
}

int serve_hub(std::string_view name, const config::PipelineConfig& config, int metrics_port,
              const std::function<std::unique_ptr<HubStage>(HubContext&)>& make_stage) {
  service::init_logging(name);
  service::install_stop_handlers();
  HubOptions options;
  options.name = std::string(name);
  options.started = std::chrono::steady_clock::now();  // for the status probe's uptime
  options.max_wait =
      std::min(std::chrono::milliseconds(100),
               std::chrono::milliseconds(config::liveness_of(config).heartbeat_interval_ms));
  metrics::Exporter exporter(name, metrics_port, 1, config::metrics_of(config).address);
  metrics::StageMetrics stage_metrics(exporter.registry(), name);
  zmq::context_t context(1);
  const security::HubSecurity security(context, config::security_of(config), name,
                                       exporter.registry());
  HubContext hub{context, security, exporter, stage_metrics};
  const std::unique_ptr<HubStage> stage = make_stage(hub);
  // Ready once bound: a hub's part needs no worker (they connect to it; waiting for them would
  // deadlock an orchestrator that routes only to ready pods). docs/DEPLOY.md, Probes.
  exporter.readiness().set(true);
  // The pushes to the other hubs (the gateway's cancels and heartbeats to the batchers' ingress,
  // the batcher's failed results to the gateways), one socket per endpoint, made on first use.
  transport::SocketOptions push_options;
  push_options.curve = security.client();
  transport::PushSockets pushes(context, push_options);
  run_hub(*stage, options, pushes, stage_metrics);
  return 0;
}

}  // namespace seqpipe::hub
