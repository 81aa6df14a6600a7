#include "layers.h"

#include "ops.h"

namespace seqpipe::engine::layers {

DataType gemm_input_type(const T5Model& model) {
  return ops::linear_input_type(model.lm_head());  // every linear layer has the compute type
}

Tensor gemm_input_buffer(const T5Model& model, int64_t rows, int64_t cols, Device device) {
  const DataType type = gemm_input_type(model);
  return type == DataType::kF32 ? Tensor() : Tensor::empty({rows, cols}, device, type);
}

void feed_forward_residual(const T5Model& model, const FeedForwardWeights& w,
                           const TensorView& normed, const TensorView& ff_a, const TensorView& ff_b,
                           const TensorView& ff_in, const TensorView& hidden) {
  if (model.config().feed_forward == FeedForward::kGatedGelu) {
    ops::linear(normed, w.wi, ff_a);
    ops::linear(normed, w.wi_1, ff_b);
    ops::feed_forward_activation(ff_a, ff_b, ff_in);
  } else {  // the GEMM's epilogue is the ReLU and writes the output GEMM's input type
    ops::linear_relu(normed, w.wi, ff_in);
  }
  ops::linear(ff_in, w.wo, hidden, 1.0f);  // residual add fused into the GEMM (beta = 1)
}

}  // namespace seqpipe::engine::layers
