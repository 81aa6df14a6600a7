#pragma once
// How the batcher's deadline answers word a time, and the keys that set a request's deadline.
#include <chrono>
#include <string>

#include "batcher/dynamic_batcher.h"
#include "seqpipe/config/gateway_config.h"

namespace seqpipe::batcher {

inline std::string millis(Clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}
inline const std::string kDeadlineKeys{config::kDeadlineSources};

}  // namespace seqpipe::batcher
