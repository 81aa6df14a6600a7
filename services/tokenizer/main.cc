// seqpipe-tokenizer: one tokenizer replica. Start more copies (same command, same config) to scale.
#include "seqpipe/config/gateway_config.h"
#include "seqpipe/config/metrics_config.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/config/tokenizer_config.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/runtime/worker.h"
#include "stage_model.h"
#include "tokenizer/tokenizer_stage.h"

int main(int argc, char** argv) {
  using namespace seqpipe;
  return service::run_service_main(
      argc, argv, "tokenizer", "Tokenizes request texts (SentencePiece) and feeds the batcher.",
      [](const config::PipelineConfig& c) {
        const config::TokenizerConfig& stage = config::tokenizer_of(c);
        const config::ModelConfig& model = config::model_of(c);
        return worker::serve_worker(
            "tokenizer", config::metrics_of(c).address, stage.metrics_port,
            worker::hubs_or(stage.hub_endpoints, config::gateway_of(c).tokenizer_endpoint),
            config::liveness_of(c), config::security_of(c), config::served_model_key(model),
            [&](metrics::StageMetrics& m) {
              return std::make_unique<tokenizer::TokenizerStage>(
                  services::load_stage_tokenizer(model), tokenizer::tokenizer_options(c), m);
            });
      });
}
