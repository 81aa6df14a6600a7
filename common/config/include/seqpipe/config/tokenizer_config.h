#pragma once
// The tokenizer: `tokenizer.*` keys.
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

#include "seqpipe/config/worker_config.h"

namespace seqpipe::config {

// Default metrics ports: tokenizers 9110.., encoders 9120.., decoders 9130.., postprocessors
// 9140.. (deploy/prometheus/prometheus.yml scrapes these).
struct TokenizerConfig : WorkerConfig {
  TokenizerConfig() { metrics_port = 9110; }
  bool operator==(const TokenizerConfig&) const = default;
};

}  // namespace seqpipe::config
