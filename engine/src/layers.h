#pragma once
// Pieces of a T5 block shared by the encoder and the decoder.
#include <cstdint>

#include "seqpipe/engine/model.h"

namespace seqpipe::engine::layers {

// hidden += FFN(normed), m rows. ff_a and ff_b are workspaces of m * d_ff floats (ff_b is only
// used by the gated FFN).
void feed_forward_residual(const T5Model& model, const FeedForwardWeights& w, const float* normed,
                           int64_t m, float* ff_a, float* ff_b, float* hidden);

}  // namespace seqpipe::engine::layers
