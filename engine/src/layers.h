#pragma once
// Pieces of a T5 block shared by the encoder and the decoder.
#include "seqpipe/engine/model.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine::layers {

// The type the model's linear layers read their inputs in when an op writes them directly
// (ops::linear_input_type): what the `normed` buffers and ff_in below are made in.
DataType gemm_input_type(const T5Model& model);

// A [rows, cols] workspace in gemm_input_type(model), or undefined where that is f32 (the
// layers then use their f32 buffer in its place: see ff_in below).
Tensor gemm_input_buffer(const T5Model& model, int64_t rows, int64_t cols, Device device);

// hidden += FFN(normed), over normed's rows. ff_a and ff_b are f32 workspaces of [rows, d_ff]
// (only the gated FFN uses them); ff_in ([rows, d_ff], gemm_input_type) takes the activation
// for the output GEMM (the ReLU FFN's input GEMM writes it directly), and is ff_a itself where
// that type is f32.
void feed_forward_residual(const T5Model& model, const FeedForwardWeights& w,
                           const TensorView& normed, const TensorView& ff_a, const TensorView& ff_b,
                           const TensorView& ff_in, const TensorView& hidden);

}  // namespace seqpipe::engine::layers
