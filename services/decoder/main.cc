// seqpipe-decoder: one decoder replica. Start more copies (same command, same config) to scale.
#include "decoder/decoder_stage.h"
#include "seqpipe/config/config.h"
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
        return worker::serve_worker(
            "decoder", c.metrics.address, c.decoder.metrics_port,
            worker::hubs_or(c.decoder.hub_endpoints, c.batcher.decoder_endpoint), c.liveness,
            c.security, config::served_model_key(c.model), [&](metrics::StageMetrics& m) {
              return std::make_unique<decoder::DecoderStage>(
                  services::load_stage_model(c, "decoder", c.decoder.compute_type,
                                             c.decoder.threads, m),
                  decoder::decoder_options(c), m);
            });
      });
}
