// seqpipe-encoder: one encoder replica. Start more copies (same command, same config) to scale.
#include "encoder/encoder_stage.h"
#include "seqpipe/config/config.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/runtime/worker.h"
#include "stage_model.h"

int main(int argc, char** argv) {
  using namespace seqpipe;
  return service::run_service_main(
      argc, argv, "encoder", "Runs the T5 encoder on batches from the batcher.",
      [](const config::PipelineConfig& c) {
        return worker::serve_worker(
            "encoder", c.metrics.address, c.encoder.metrics_port,
            worker::hubs_or(c.encoder.hub_endpoints, c.batcher.encoder_endpoint), c.liveness,
            c.security, config::served_model_key(c.model), [&](metrics::StageMetrics& m) {
              return std::make_unique<encoder::EncoderStage>(
                  services::load_stage_model(c, "encoder", c.encoder.compute_type,
                                             c.encoder.threads, m),
                  encoder::encoder_options(c), m);
            });
      });
}
