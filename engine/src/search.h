#pragma once
// The search strategies behind the Generator (src/search.cc).
#include <memory>

#include "seqpipe/engine/decoding.h"

namespace seqpipe::engine {

// Greedy (num_beams 1: slots[0]) or beam search (num_beams slots from `slots`), validated
// options assumed.
std::unique_ptr<SearchStrategy> make_search(const int* slots, const DecodingOptions& o,
                                            const T5Config& c);

}  // namespace seqpipe::engine
