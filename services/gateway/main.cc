// seqpipe-gateway: the client-facing hub. Its sockets, front doors and logic (GatewayStage, over
// Gateway) in the one hub loop (hub::run_hub).
#include <memory>

#include "gateway/gateway_stage.h"
#include "seqpipe/config/gateway_config.h"
#include "seqpipe/runtime/hub_loop.h"
#include "seqpipe/runtime/service_main.h"

int main(int argc, char** argv) {
  using namespace seqpipe;
  return service::run_service_main_layers(
      argc, argv, "gateway",
      "Serves clients: validates requests, keeps deadlines, answers each once.",
      [](const config::LoadedConfig& loaded) {
        const config::PipelineConfig& c = config::pipeline_of(loaded);
        return hub::serve_hub("gateway", c, config::gateway_of(c).metrics_port,
                              [&](hub::HubContext& hub) {
                                return std::make_unique<gateway::GatewayStage>(loaded, hub);
                              });
      });
}
