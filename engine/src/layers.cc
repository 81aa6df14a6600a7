#include "layers.h"

#include "ops.h"

namespace seqpipe::engine::layers {

void feed_forward_residual(const T5Model& model, const FeedForwardWeights& w,
                           const TensorView& normed, const TensorView& ff_a, const TensorView& ff_b,
                           const TensorView& hidden) {
  ops::linear(normed, w.wi, ff_a);
  if (model.config().feed_forward == FeedForward::kGatedGelu) {
    ops::linear(normed, w.wi_1, ff_b);
    ops::gated_gelu(ff_a, ff_b);
  } else {
    ops::relu(ff_a);
  }
  ops::linear(ff_a, w.wo, hidden, 1.0f);  // residual add fused into the GEMM (beta = 1)
}

}  // namespace seqpipe::engine::layers
