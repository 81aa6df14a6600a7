#pragma once
// A config that cannot be used: what loading, validation and every consumer's own checks throw.
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

#include <stdexcept>

namespace seqpipe::config {

// A config that cannot be used. The message names the source (file[:line] or the `--set`
// argument) and the key path, e.g.
//   "config/pipeline.yaml:41: batcher.max_batch_size must be an integer in [1, 1024], got 0".
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace seqpipe::config
