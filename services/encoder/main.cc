// seqpipe-encoder: one encoder replica. Start more copies (same command, same config) to scale.
#include "encoder/encoder_stage.h"
#include "seqpipe/config/batcher_config.h"
#include "seqpipe/config/encoder_config.h"
#include "seqpipe/config/metrics_config.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/runtime/worker.h"
#include "stage_model.h"

int main(int argc, char** argv) {
  using namespace seqpipe;
  return service::run_service_main(
      argc, argv, "encoder", "Runs the T5 encoder on batches from the batcher.",
      [](const config::PipelineConfig& c) {
        const config::EncoderConfig& stage = config::encoder_of(c);
        const config::ModelConfig& model = config::model_of(c);
        return worker::serve_worker(
            "encoder", config::metrics_of(c).address, stage.metrics_port,
            worker::hubs_or(stage.hub_endpoints, config::batcher_of(c).encoder_endpoint),
            config::liveness_of(c), config::security_of(c), config::served_model_key(model),
            [&](metrics::StageMetrics& m) {
              return std::make_unique<encoder::EncoderStage>(
                  services::load_stage_model(model, "encoder", stage.compute_type, stage.threads,
                                             m),
                  encoder::encoder_options(c), m);
            });
      });
}
