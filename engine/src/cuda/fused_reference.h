#pragma once
// The host twins of src/cuda/norm_cast.cu's kernels (as src/cuda/reference.h is of
// src/cuda/kernels.cu's): the same src/cuda/half_math.h functions in the kernel's order, which
// CI checks against the CPU backend. Half outputs are their bits (uint16_t).
#include <cstdint>

namespace seqpipe::engine::cuda::reference {

void rms_norm_half(const float* x, int64_t m, int64_t d, const float* w, float eps, float scale,
                   uint16_t* y, bool f16);
// y = relu(a) (b null) or gated_gelu(a, b), as half bits.
void activation_half(const float* a, const float* b, int64_t n, uint16_t* y, bool f16);
void to_half_input(const float* x, int64_t n, uint16_t* out, bool f16);
// ops::top_k_log_softmax as its kernel does it: per row, the max, the sum, then k passes each
// taking the best entry after the previous pass's (math::comes_after).
void top_k_log_softmax(const float* logits, int64_t rows, int64_t vocab, int k, int* ids,
                       float* logprobs);

}  // namespace seqpipe::engine::cuda::reference
