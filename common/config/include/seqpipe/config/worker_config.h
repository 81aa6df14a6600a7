#pragma once
// What every replicated worker stage shares (tokenizer, encoder, decoder, postprocessor).
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

#include <string>
#include <vector>

namespace seqpipe::config {

// The value of a worker stage's `replicas` or an engine stage's `threads` that asks for them to be
// sized from the machine (size_for_cores).
inline constexpr int kAuto = 0;

// What every replicated worker stage shares.
struct WorkerConfig {
  // Processes of this stage that `seqpipe up` starts; 0 = auto: sized from the machine's cores
  // (size_for_cores), resolved by load_pipeline_config.
  int replicas = kAuto;
  // Work items one replica may hold at once (credit-based flow control): more hides the
  // network round trip, fewer spreads work more evenly across replicas.
  int credits = 4;
  // Prometheus /metrics HTTP port of the first replica; replica i uses metrics_port + i.
  // 0 = any free port (logged).
  int metrics_port = 0;
  // The hubs a replica serves (each binds the endpoint): empty = the one hub of the pipeline
  // (gateway.tokenizer_endpoint for tokenizers, batcher.<stage>_endpoint for the others). With
  // several, the replica connects to each, splits its credits between them and returns each
  // result to the hub that sent the work (several gateways, or several batchers).
  std::vector<std::string> hub_endpoints;

  bool operator==(const WorkerConfig&) const = default;
};

}  // namespace seqpipe::config
