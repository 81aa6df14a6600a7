#pragma once
// The per-element arithmetic of the fused decode-step attention kernel (src/cuda/attention.cu)
// beside src/cuda/math.h's: written once for the kernel and its host twin
// (src/cuda/reference.cc), which CI tests against the CPU backend. Plain C++ without CUDA
// headers, as math.h.
#include <cstdint>
#include <cstring>

#include "cuda/math.h"

namespace seqpipe::engine::cuda::math {

// A KV-cache element as the attention kernel stores and reads it: fp32 (today's cache), or bf16
// bits for a half-precision cache (rounded to nearest even as bf16_bits; read back exactly). The
// kernel is a template on this type, its sums fp32 either way.
struct Bf16 {
  uint16_t bits;
};

SEQPIPE_HD float cache_load(float x) {
  return x;
}
SEQPIPE_HD float cache_load(Bf16 x) {
  const uint32_t bits = static_cast<uint32_t>(x.bits) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
#endif
}

SEQPIPE_HD void cache_store(float& slot, float x) {
  slot = x;
}
SEQPIPE_HD void cache_store(Bf16& slot, float x) {
#if defined(__CUDA_ARCH__)
  slot.bits = bf16_bits(__float_as_uint(x));
#else
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  slot.bits = bf16_bits(bits);
#endif
}

// How the decode kernel's block splits its work: each key's dot product over kKeyLanes lanes
// (a warp holds 32 / kKeyLanes keys at a time), and the weighted sum of the values over
// `value_parts` groups of keys per dimension, their partial sums added in part order.
constexpr int kKeyLanes = 8;
SEQPIPE_HD int value_parts(int threads, int64_t head_dim) {
  return head_dim <= threads ? static_cast<int>(threads / head_dim) : 1;
}

// A score as the softmax sees it: q . k plus the head's position bias (0 without one).
SEQPIPE_HD float biased_score(float dot, const float* bias_row, int64_t key, int64_t query,
                              int64_t max_distance) {
  return bias_row == nullptr ? dot : dot + bias_row[bias_column(key, query, max_distance)];
}

}  // namespace seqpipe::engine::cuda::math
