#include "batcher/batcher_stage.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "seqpipe/config/batcher_config.h"
#include "seqpipe/config/decoder_config.h"
#include "seqpipe/config/encoder_config.h"
#include "seqpipe/config/model_config.h"
#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/runtime/worker.h"

namespace seqpipe::batcher {
namespace {

// The batcher's line of `seqpipe status`: how its engine stages were configured to run (the
// same config and --set as they, under `seqpipe up`, systemd and compose) and its bound port.
std::string about_line(const config::PipelineConfig& c, int metrics_port) {
  const config::ModelConfig& model = config::model_of(c);
  auto compute = [&](const std::string& stage_type) {
    return (stage_type.empty() ? model.compute_type : stage_type) + " on " + model.device;
  };
  return "encoder " + compute(config::encoder_of(c).compute_type) + "; decoder " +
         compute(config::decoder_of(c).compute_type) +
         "; /metrics :" + std::to_string(metrics_port);
}

}  // namespace

BatcherStage::BatcherStage(const config::PipelineConfig& c, hub::HubContext& hub)
    : metrics_(hub.metrics),
      ingress_(hub.context, zmq::socket_type::pull, hub.bound_options()),
      encoders_(hub.context, zmq::socket_type::router, hub.bound_options()),
      decoders_(hub.context, zmq::socket_type::router, hub.bound_options()),
      postprocessors_(hub.context, zmq::socket_type::router, hub.bound_options()),
      batcher_(config::batcher_of(c), config::liveness_of(c), hub.metrics),
      about_(about_line(c, hub.exporter.port())) {
  const config::BatcherConfig& b = config::batcher_of(c);
  ingress_.bind(b.ingress_endpoint, "batcher.ingress_endpoint");
  encoders_.bind(b.encoder_endpoint, "batcher.encoder_endpoint");
  decoders_.bind(b.decoder_endpoint, "batcher.decoder_endpoint");
  postprocessors_.bind(b.postprocessor_endpoint, "batcher.postprocessor_endpoint");
  spdlog::info("batcher: ingress {}, encoders {}, decoders {}, postprocessors {}, metrics on :{}",
               b.ingress_endpoint, b.encoder_endpoint, b.decoder_endpoint, b.postprocessor_endpoint,
               hub.exporter.port());
}

void BatcherStage::watch(hub::HubSockets& sockets) {
  sockets.input(ingress_);
  // Their links in Role's order.
  sockets.workers(encoders_, "an encoder");
  sockets.workers(decoders_, "a decoder");
  sockets.workers(postprocessors_, "a postprocessor");
}

std::optional<std::chrono::nanoseconds> BatcherStage::until_next_timer() const {
  return batcher_.next_wakeup();
}

// The one input: the tokenizers' sequences.
void BatcherStage::on_readable(size_t /*input*/, const Now& now, Outbox& out) {
  while (auto frames = ingress_.try_recv()) {
    if (auto m = worker::decode_frames(*frames, 1, "the ingress socket", limits_, metrics_))
      batcher_.on_sequences(std::move(*m), now, out);
  }
}

void BatcherStage::on_worker(size_t link, const std::string& worker, stage::StageMessage&& message,
                             const Now& now) {
  batcher_.on_worker(static_cast<Role>(link), worker, std::move(message), now);
}

void BatcherStage::unreachable(size_t link, const std::string& worker, const Now& now,
                               Outbox& out) {
  batcher_.worker_dead(static_cast<Role>(link), worker, now, out);
}

void BatcherStage::stopped() {
  spdlog::info("batcher: stopping with {} sequences queued", batcher_.queued());
}

}  // namespace seqpipe::batcher
