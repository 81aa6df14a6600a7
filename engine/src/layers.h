#pragma once
// Pieces of a T5 block shared by the encoder and the decoder.
#include "seqpipe/engine/model.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine::layers {

// hidden += FFN(normed), over normed's rows. ff_a and ff_b are workspaces of [rows, d_ff] (ff_b
// is only used by the gated FFN).
void feed_forward_residual(const T5Model& model, const FeedForwardWeights& w,
                           const TensorView& normed, const TensorView& ff_a, const TensorView& ff_b,
                           const TensorView& hidden);

}  // namespace seqpipe::engine::layers
