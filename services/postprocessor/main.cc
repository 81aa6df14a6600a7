// seqpipe-postprocessor: one postprocessor replica. Start more copies (same command, same config)
// to scale.
#include "postprocessor/postprocessor_stage.h"
#include "seqpipe/config/batcher_config.h"
#include "seqpipe/config/metrics_config.h"
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
        const config::PostprocessorConfig& stage = config::postprocessor_of(c);
        const config::ModelConfig& model = config::model_of(c);
        return worker::serve_worker(
            "postprocessor", config::metrics_of(c).address, stage.metrics_port,
            worker::hubs_or(stage.hub_endpoints, config::batcher_of(c).postprocessor_endpoint),
            config::liveness_of(c), config::security_of(c), config::served_model_key(model),
            [&](metrics::StageMetrics& m) {
              return std::make_unique<postprocessor::PostprocessorStage>(
                  services::load_stage_tokenizer(model), postprocessor::postprocessor_options(c),
                  m);
            });
      });
}
