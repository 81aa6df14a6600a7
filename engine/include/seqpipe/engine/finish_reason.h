#pragma once
// Why a generated sequence ended: the one definition that the serving layers (client protocol,
// stage messages, the OpenAI and TGI front doors) map to their own names. Header-only and without
// dependencies, like limits.h, so code that does not link the engine includes it too.
#include <cstdint>

namespace seqpipe::engine {

enum class FinishReason : uint8_t {
  kEos,     // the model produced its end token
  kLength,  // max_new_tokens were generated without it
  kStop,    // the output ended with a stop sequence (the search's stop ids, or the cut text)
};

}  // namespace seqpipe::engine
