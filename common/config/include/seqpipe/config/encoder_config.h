#pragma once
// The encoder: `encoder.*` keys.
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

#include <string>

#include "seqpipe/config/worker_config.h"

namespace seqpipe::config {

struct EncoderConfig : WorkerConfig {
  EncoderConfig() { metrics_port = 9120; }
  // Threads per replica for the BLAS and the engine kernels (ModelOptions.threads); 0 = auto:
  // sized from the machine's cores (size_for_cores), resolved by load_pipeline_config.
  int threads = kAuto;
  // Sequences in the warm-up batch run before the replica announces itself (0 = none), so the
  // first real request does not pay for cold caches and first-touch allocations.
  int warmup_batch_size = 8;
  // This stage's engine compute type; empty = model.compute_type.
  std::string compute_type;

  bool operator==(const EncoderConfig&) const = default;
};

}  // namespace seqpipe::config
