#pragma once
// Why a generated sequence ended: the one definition that the serving layers (client protocol,
// stage messages, the OpenAI and TGI front doors) map to their own names, and the engine's results
// carry. Header-only and without dependencies, like limits.h.
#include <cstdint>

namespace seqpipe::generation {

enum class FinishReason : uint8_t {
  kEos,     // the model produced its end token
  kLength,  // max_new_tokens were generated without it
  kStop,    // the output ended with a stop sequence (the search's stop ids, or the cut text)
};

}  // namespace seqpipe::generation
