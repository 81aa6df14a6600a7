#pragma once
// The per-element and per-row arithmetic of the CUDA kernels, written once for both sides: the
// kernels (src/cuda/kernels.cu) call these on the device, and the host reference
// (src/cuda/reference.h) calls the same functions in the same order on the CPU, where CI tests
// it against the CPU backend. A kernel adds only its launch, indexing and reductions.
// Plain C++ without CUDA headers: g++ compiles it for the reference, nvcc for the kernels.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define SEQPIPE_HD __host__ __device__ inline
#else
#define SEQPIPE_HD inline
#endif

namespace seqpipe::engine::cuda::math {

// T5LayerNorm: 1 / sqrt(mean(x^2) + eps) from a row's sum of squares over d elements.
SEQPIPE_HD float rms_inverse(float sum_of_squares, int64_t d, float eps) {
  return 1.0f / sqrtf(sum_of_squares / static_cast<float>(d) + eps);
}

// One element of the normed row: w * (x * inverse) * scale (the CPU backend's order).
SEQPIPE_HD float rms_norm_value(float x, float w, float inverse, float scale) {
  return w * (x * inverse) * scale;
}

SEQPIPE_HD float relu(float x) {
  return x > 0.0f ? x : 0.0f;
}

// gelu_new(a) * b (HF NewGELUActivation, the gated FFN of T5 v1.1):
// 0.5 a (1 + tanh(u)) = a / (1 + exp(-2u)), u = sqrt(2/pi) (a + 0.044715 a^3).
SEQPIPE_HD float gated_gelu(float a, float b) {
  const float u = 0.7978845608028654f * (a + 0.044715f * a * a * a);
  return a / (1.0f + expf(-2.0f * u)) * b;
}

// The column of the expanded position-bias table (PositionBias) for key `key` and query
// position `query`: rel = key - query, clamped to [-max_distance, max_distance].
SEQPIPE_HD int64_t bias_column(int64_t key, int64_t query, int64_t max_distance) {
  int64_t rel = key - query;
  rel = rel < -max_distance ? -max_distance : rel;
  rel = rel > max_distance ? max_distance : rel;
  return max_distance + rel;
}

// The keys a query at `query` sees: all of them, or (causal) those at positions <= query.
SEQPIPE_HD int64_t keys_seen(int64_t keys, int64_t query, bool causal) {
  return causal && query + 1 < keys ? query + 1 : keys;
}

// A softmax's unnormalised weight of `score` given the row's maximum.
SEQPIPE_HD float softmax_weight(float score, float max_score) {
  return expf(score - max_score);
}

// Argmax as torch.argmax: the larger value wins, the lower index among equals (and NaN never
// wins). Used as a reduction's combine step: (value, index) pairs in any order give the first
// maximum.
SEQPIPE_HD bool argmax_prefers(float value, int64_t index, float best, int64_t best_index) {
  return value > best || (value == best && index < best_index);
}

// fp32 -> bf16 bits, rounded to nearest even; a NaN becomes the quiet NaN 0x7fc0 (as the CPU
// backend's to_bf16). The bits of x come in as an integer so that both sides read them alike.
SEQPIPE_HD uint16_t bf16_bits(uint32_t bits) {
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace seqpipe::engine::cuda::math
