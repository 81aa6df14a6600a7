// seqpipe-postprocessor: one postprocessor replica. Start more copies (same command, same config)
// to scale.
#include "postprocessor/postprocessor_stage.h"
#include "seqpipe/config/config.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/runtime/worker.h"
#include "stage_model.h"

int main(int argc, char** argv) {
  using namespace seqpipe;
  return service::run_service_main(
      argc, argv, "postprocessor",
      "Detokenizes output ids and returns results to the owning gateway.",
      [](const config::PipelineConfig& c) {
        return worker::serve_worker(
            "postprocessor", c.metrics.address, c.postprocessor.metrics_port,
            worker::hubs_or(c.postprocessor.hub_endpoints, c.batcher.postprocessor_endpoint),
            c.liveness, c.security, config::served_model_key(c.model),
            [&](metrics::StageMetrics& m) {
              return std::make_unique<postprocessor::PostprocessorStage>(
                  services::load_stage_tokenizer(c), postprocessor::postprocessor_options(c), m);
            });
      });
}
