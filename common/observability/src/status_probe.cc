// The status probe over sockets (status.cc is the codec alone, which the fuzz targets build).
#include <algorithm>

#include "seqpipe/config/batcher_config.h"
#include "seqpipe/config/gateway_config.h"
#include "seqpipe/config/pipeline_config_fwd.h"
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

bool PipelineStatus::has_replicas_of(const std::string& key) const {
  for (const HubAnswer& hub : hubs) {
    for (const StageStatus& s : hub.stages.value_or(std::vector<StageStatus>{})) {
      if (s.replicas > 0 && s.stage.size() > key.size() + 1 && s.stage.ends_with(" " + key))
        return true;
    }
  }
  return false;
}

PipelineStatus ask_pipeline(zmq::context_t& context, const config::PipelineConfig& config,
                            std::chrono::milliseconds wait, const transport::CurveKeys& curve) {
  PipelineStatus status;
  transport::SocketOptions options;
  options.curve = curve;
  for (const auto& [hub, endpoint] :
       {std::pair{"gateway", config::gateway_of(config).tokenizer_endpoint},
        std::pair{"batcher", config::batcher_of(config).encoder_endpoint}}) {
    transport::Socket probe(context, zmq::socket_type::dealer, options);
    probe.connect(endpoint);
    HubAnswer answer{hub, endpoint, std::nullopt};
    if (probe.send({kProbe}, true)) {  // a hub that refused our key: no connection
      const auto reply = probe.recv(wait);
      if (reply && reply->size() == 1) answer.stages = decode(reply->front());
    }
    if (!answer.stages) status.missing.push_back(answer.hub + " (down)");
    status.hubs.push_back(std::move(answer));
  }
  // A stage is missing when no line of it has a live replica: with a repository, a version
  // unloaded (its lines at 0) leaves the stage served by the others.
  std::vector<std::pair<std::string, int>> replicas;  // by stage, over its versions' lines
  for (const HubAnswer& hub : status.hubs) {
    for (const StageStatus& s : hub.stages.value_or(std::vector<StageStatus>{})) {
      const std::string stage = s.stage.substr(0, s.stage.find(' '));
      auto it = std::find_if(replicas.begin(), replicas.end(),
                             [&](const auto& r) { return r.first == stage; });
      if (it == replicas.end()) it = replicas.insert(replicas.end(), {stage, 0});
      it->second += s.replicas;
    }
  }
  for (const auto& [stage, live] : replicas)
    if (live == 0) status.missing.push_back(stage);
  return status;
}

}  // namespace seqpipe::status
