// seqpipe-tokenizer: one tokenizer replica. Start more copies (same command, same config) to scale.
#include "seqpipe/config/config.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/runtime/worker.h"
#include "stage_model.h"
#include "tokenizer/tokenizer_stage.h"

int main(int argc, char** argv) {
  using namespace seqpipe;
  return service::run_service_main(
      argc, argv, "tokenizer", "Tokenizes request texts (SentencePiece) and feeds the batcher.",
      [](const config::PipelineConfig& c) {
        return worker::serve_worker(
            "tokenizer", c.metrics.address, c.tokenizer.metrics_port,
            worker::hubs_or(c.tokenizer.hub_endpoints, c.gateway.tokenizer_endpoint), c.liveness,
            c.security, config::served_model_key(c.model), [&](metrics::StageMetrics& m) {
              return std::make_unique<tokenizer::TokenizerStage>(
                  services::load_stage_tokenizer(c), tokenizer::tokenizer_options(c), m);
            });
      });
}
