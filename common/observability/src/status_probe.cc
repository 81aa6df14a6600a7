// The status probe over sockets (status.cc is the codec alone, which the fuzz targets build).
#include "seqpipe/observability/status.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::status {

bool PipelineStatus::ready_for(const std::string& key) const {
  for (const char* stage : {"tokenizer", "encoder", "decoder", "postprocessor"}) {
    bool live = false;
    for (const HubAnswer& hub : hubs) {
      if (!hub.stages) return false;  // a hub is down
      for (const StageStatus& s : *hub.stages)
        live = live || (s.stage == std::string(stage) + " " + key && s.replicas > 0);
    }
    if (!live) return false;
  }
  return true;
}

PipelineStatus ask_pipeline(zmq::context_t& context, const config::PipelineConfig& config,
                            std::chrono::milliseconds wait, const transport::CurveKeys& curve) {
  PipelineStatus status;
  transport::SocketOptions options;
  options.curve = curve;
  for (const auto& [hub, endpoint] : {std::pair{"gateway", config.gateway.tokenizer_endpoint},
                                      std::pair{"batcher", config.batcher.encoder_endpoint}}) {
    transport::Socket probe(context, zmq::socket_type::dealer, options);
    probe.connect(endpoint);
    HubAnswer answer{hub, endpoint, std::nullopt};
    if (probe.send({kProbe}, true)) {  // a hub that refused our key: no connection
      const auto reply = probe.recv(wait);
      if (reply && reply->size() == 1) answer.stages = decode(reply->front());
    }
    if (!answer.stages) status.missing.push_back(answer.hub + " (down)");
    for (const StageStatus& stage : answer.stages.value_or(std::vector<StageStatus>{})) {
      if (stage.replicas == 0) status.missing.push_back(stage.stage);
    }
    status.hubs.push_back(std::move(answer));
  }
  return status;
}

}  // namespace seqpipe::status
