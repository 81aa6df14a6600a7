// seqpipe-batcher: the engine-side hub. Its sockets and logic (BatcherStage, over BatcherHub)
// in the one hub loop (hub::run_hub): it batches sequences and dispatches work by credit.
#include <memory>

#include "batcher/batcher_stage.h"
#include "seqpipe/config/batcher_config.h"
#include "seqpipe/runtime/hub_loop.h"
#include "seqpipe/runtime/service_main.h"

int main(int argc, char** argv) {
  using namespace seqpipe;
  return service::run_service_main(
      argc, argv, "batcher", "Batches sequences for the encoders and dispatches work by credit.",
      [](const config::PipelineConfig& c) {
        return hub::serve_hub(
            "batcher", c, config::batcher_of(c).metrics_port,
            [&](hub::HubContext& hub) { return std::make_unique<batcher::BatcherStage>(c, hub); });
      });
}
