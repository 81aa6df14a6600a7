#include "layers.h"

#include "ops.h"

namespace seqpipe::engine::layers {

void feed_forward_residual(const T5Model& model, const FeedForwardWeights& w, const float* normed,
                           int64_t m, float* ff_a, float* ff_b, float* hidden) {
  const Device dev = model.device();
  const int64_t n = m * model.config().d_ff;
  ops::linear(dev, normed, m, w.wi, ff_a);
  if (model.config().feed_forward == FeedForward::kGatedGelu) {
    ops::linear(dev, normed, m, w.wi_1, ff_b);
    ops::gated_gelu(dev, ff_a, ff_b, n);
  } else {
    ops::relu(dev, ff_a, n);
  }
  ops::linear(dev, ff_a, m, w.wo, hidden, 1.0f);  // residual add fused into the GEMM (beta = 1)
}

}  // namespace seqpipe::engine::layers
