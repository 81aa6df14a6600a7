// seqpipe-batcher: the engine-side hub. Binds the tokenizers' ingress and one socket per engine
// stage; one loop polls them all and dispatches by credit.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "batcher/batcher_hub.h"
#include "seqpipe/config/config.h"
#include "seqpipe/observability/metrics.h"
#include "seqpipe/observability/status.h"
#include "seqpipe/runtime/hub.h"
#include "seqpipe/runtime/service.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/runtime/worker.h"
#include "seqpipe/security/security.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::batcher {
namespace {

int serve(const config::PipelineConfig& c) {
  service::init_logging("batcher");
  service::install_stop_handlers();
  const auto started = std::chrono::steady_clock::now();  // for the status probe's uptime
  metrics::Exporter exporter("batcher", c.batcher.metrics_port, 1, c.metrics.address);
  metrics::StageMetrics stage_metrics(exporter.registry(), "batcher");

  zmq::context_t context(1);
  const security::HubSecurity security(context, c.security, "batcher", exporter.registry());
  transport::SocketOptions bound;
  bound.curve = security.server();
  transport::Socket ingress(context, zmq::socket_type::pull, bound);
  transport::Socket encoders(context, zmq::socket_type::router, bound);
  transport::Socket decoders(context, zmq::socket_type::router, bound);
  transport::Socket postprocessors(context, zmq::socket_type::router, bound);
  ingress.bind(c.batcher.ingress_endpoint, "batcher.ingress_endpoint");
  encoders.bind(c.batcher.encoder_endpoint, "batcher.encoder_endpoint");
  decoders.bind(c.batcher.decoder_endpoint, "batcher.decoder_endpoint");
  postprocessors.bind(c.batcher.postprocessor_endpoint, "batcher.postprocessor_endpoint");
  spdlog::info("batcher: ingress {}, encoders {}, decoders {}, postprocessors {}, metrics on :{}",
               c.batcher.ingress_endpoint, c.batcher.encoder_endpoint, c.batcher.decoder_endpoint,
               c.batcher.postprocessor_endpoint, exporter.port());

  BatcherHub batcher(c, stage_metrics);
  // Ready once bound: a batcher's part needs no worker (they connect to it; waiting for them
  // would deadlock an orchestrator that routes only to ready pods).
  exporter.readiness().set(true);
  // The batcher's line of `seqpipe status`: how its engine stages were configured to run (the
  // same config and --set as they, under `seqpipe up`, systemd and compose) and its bound port.
  auto compute = [&](const std::string& stage_type) {
    return (stage_type.empty() ? c.model.compute_type : stage_type) + " on " + c.model.device;
  };
  const std::string about = "encoder " + compute(c.encoder.compute_type) + "; decoder " +
                            compute(c.decoder.compute_type) +
                            "; /metrics :" + std::to_string(exporter.port());
  transport::Poller poller;
  const size_t kIngress = poller.add(ingress);
  const std::vector<transport::Socket*> worker_sockets{&encoders, &decoders,
                                                       &postprocessors};  // by Role
  const char* worker_names[] = {"an encoder", "a decoder", "a postprocessor"};
  for (auto* s : worker_sockets) poller.add(*s);

  // Results for gateways (errors: overloaded) over PUSH, one socket per gateway, made on first use.
  transport::SocketOptions gateway_options;
  gateway_options.curve = security.client();
  transport::PushSockets gateways(context, gateway_options);
  const stage::Limits limits;
  Outbox out;
  while (!service::stop_requested()) {
    const auto timeout =
        std::clamp(std::chrono::ceil<std::chrono::milliseconds>(batcher.next_wakeup()),
                   std::chrono::milliseconds(0),
                   std::min(std::chrono::milliseconds(100),
                            std::chrono::milliseconds(c.liveness.heartbeat_interval_ms)));
    poller.poll(timeout);
    const Now now = Now::read();  // the one reading of the clocks per round
    if (poller.readable(kIngress)) {
      while (auto frames = ingress.try_recv()) {
        if (auto m =
                worker::decode_frames(*frames, 1, "the ingress socket", limits, stage_metrics)) {
          batcher.on_sequences(std::move(*m), now, out);
        }
      }
    }
    for (size_t r = 0; r < 3; ++r) {
      if (!poller.readable(kIngress + 1 + r)) continue;
      hub::read_workers(
          *worker_sockets[r], worker_names[r], limits, stage_metrics,
          [&] { return status::with_uptime(batcher.status(), started, about); },
          [&](const std::string& worker, stage::StageMessage&& m) {
            batcher.on_worker(static_cast<Role>(r), worker, std::move(m), now);
          });
    }
    batcher.tick(now, out);
    hub::send_rounds(
        out, worker_sockets, gateways, "batcher", [&](Outbox& o) { batcher.dispatch(now, o); },
        [&](size_t link, const std::string& worker, Outbox& o) {
          batcher.worker_dead(static_cast<Role>(link), worker, now, o);
        });
    out.clear();
  }
  spdlog::info("batcher: stopping with {} sequences queued", batcher.queued());
  return 0;
}

}  // namespace
}  // namespace seqpipe::batcher

int main(int argc, char** argv) {
  return seqpipe::service::run_service_main(
      argc, argv, "batcher", "Batches sequences for the encoders and dispatches work by credit.",
      seqpipe::batcher::serve);
}
