// seqpipe-decoder: one decoder replica. Start more copies (same command, same config) to scale.
#include "decoder/decoder_stage.h"
#include "seqpipe/config/batcher_config.h"
#include "seqpipe/config/decoder_config.h"
#include "seqpipe/config/metrics_config.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/runtime/worker.h"
#include "stage_model.h"

int main(int argc, char** argv) {
  using namespace seqpipe;
  return service::run_service_main(
      argc, argv, "decoder",
      "Runs the T5 decoder with continuous batching over its KV-cache slots.",
      [](const config::PipelineConfig& c) {
        const config::DecoderConfig& stage = config::decoder_of(c);
        const config::ModelConfig& model = config::model_of(c);
        return worker::serve_worker(
            "decoder", config::metrics_of(c).address, stage.metrics_port,
            worker::hubs_or(stage.hub_endpoints, config::batcher_of(c).decoder_endpoint),
            config::liveness_of(c), config::security_of(c), config::served_model_key(model),
            [&](metrics::StageMetrics& m) {
              return std::make_unique<decoder::DecoderStage>(
                  services::load_stage_model(model, "decoder", stage.compute_type, stage.threads,
                                             m),
                  decoder::decoder_options(c), m);
            });
      });
}
