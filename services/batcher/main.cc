// seqpipe-batcher: the engine-side hub. Binds the tokenizers' ingress and one socket per engine
// stage; one loop polls them all and dispatches by credit.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "batcher/batcher_hub.h"
#include "seqpipe/common/config.h"
#include "seqpipe/common/metrics.h"
#include "seqpipe/common/service.h"
#include "seqpipe/common/transport.h"
#include "seqpipe/common/worker.h"

namespace seqpipe::batcher {
namespace {

int serve(const config::PipelineConfig& c) {
  service::init_logging("batcher");
  service::install_stop_handlers();
  metrics::Exporter exporter("batcher", c.batcher.metrics_port, 1, c.metrics.address);
  metrics::StageMetrics stage_metrics(exporter.registry(), "batcher");

  zmq::context_t context(1);
  transport::Socket ingress(context, zmq::socket_type::pull);
  transport::Socket encoders(context, zmq::socket_type::router);
  transport::Socket decoders(context, zmq::socket_type::router);
  transport::Socket postprocessors(context, zmq::socket_type::router);
  ingress.bind(c.batcher.ingress_endpoint);
  encoders.bind(c.batcher.encoder_endpoint);
  decoders.bind(c.batcher.decoder_endpoint);
  postprocessors.bind(c.batcher.postprocessor_endpoint);
  spdlog::info("batcher: ingress {}, encoders {}, decoders {}, postprocessors {}, metrics on :{}",
               c.batcher.ingress_endpoint, c.batcher.encoder_endpoint, c.batcher.decoder_endpoint,
               c.batcher.postprocessor_endpoint, exporter.port());

  BatcherHub hub(c, stage_metrics);
  transport::Poller poller;
  const size_t kIngress = poller.add(ingress);
  transport::Socket* worker_sockets[] = {&encoders, &decoders, &postprocessors};
  const char* worker_names[] = {"an encoder", "a decoder", "a postprocessor"};
  for (auto* s : worker_sockets) poller.add(*s);

  // Results for gateways (errors: overloaded) over PUSH, one socket per gateway, made on first use.
  transport::PushSockets gateways(context);
  const stage::Limits limits;
  Outbox out;
  while (!service::stop_requested()) {
    const auto timeout =
        std::clamp(std::chrono::ceil<std::chrono::milliseconds>(hub.next_wakeup()),
                   std::chrono::milliseconds(0),
                   std::min(std::chrono::milliseconds(100),
                            std::chrono::milliseconds(c.liveness.heartbeat_interval_ms)));
    poller.poll(timeout);
    const Now now = Now::read();  // the one reading of the clocks per round
    if (poller.readable(kIngress)) {
      while (auto frames = ingress.try_recv()) {
        if (auto m =
                worker::decode_frames(*frames, 1, "the ingress socket", limits, stage_metrics)) {
          hub.on_sequences(std::move(*m), now, out);
        }
      }
    }
    for (size_t r = 0; r < 3; ++r) {
      if (!poller.readable(kIngress + 1 + r)) continue;
      while (auto frames = worker_sockets[r]->try_recv()) {
        if (frames->size() == 2 && (*frames)[1] == status::kProbe) {
          worker_sockets[r]->send(
              {std::string_view((*frames)[0]), std::string_view(status::encode(hub.status()))});
        } else if (auto m =
                       worker::decode_frames(*frames, 2, worker_names[r], limits, stage_metrics)) {
          hub.on_worker(static_cast<Role>(r), (*frames)[0], std::move(*m), now);
        }
      }
    }
    hub.tick(now, out);
    // A send fails only to a worker that left: it is declared dead and its work (the message
    // that failed included) is dispatched anew in the next round. What a last round leaves
    // waits for the next loop.
    for (int round = 0; round < 4; ++round) {
      hub.dispatch(now, out);
      if (out.to_workers.empty() && out.to_gateways.empty()) break;
      auto to_workers = std::move(out.to_workers);
      auto to_gateways = std::move(out.to_gateways);
      out.clear();
      for (auto& m : to_workers) {
        auto* socket = worker_sockets[static_cast<size_t>(m.role)];
        if (!socket->send(
                {std::string_view(m.worker), std::string_view(stage::encode(m.message))})) {
          hub.worker_dead(m.role, m.worker, now, out);
        }
      }
      for (auto& [endpoint, message] : to_gateways) {
        if (!gateways.send(endpoint, stage::encode(message))) {
          spdlog::warn("batcher: could not send a result to gateway {}", endpoint);
        }
      }
    }
  }
  spdlog::info("batcher: stopping with {} sequences queued", hub.queued());
  return 0;
}

}  // namespace
}  // namespace seqpipe::batcher

int main(int argc, char** argv) {
  return seqpipe::config::run_service_main(
      argc, argv, "batcher", "Batches sequences for the encoders and dispatches work by credit.",
      seqpipe::batcher::serve);
}
