#pragma once
// The per-element arithmetic of the fused decode-step attention kernel (src/cuda/attention.cu)
// beside src/cuda/math.h's and src/cuda/half_math.h's: written once for the kernel and its host
// twin (src/cuda/reference.cc), which CI tests against the CPU backend. Plain C++ without CUDA
// headers, as math.h.
#include <cstdint>

#include "cuda/half_math.h"
#include "cuda/math.h"

namespace seqpipe::engine::cuda::math {

// A KV-cache element as the attention kernel stores and reads it: fp32, or the bits of a bf16 /
// fp16 cache (the model's compute type on a GPU, ops::kv_cache_type). A value is stored as a
// half GEMM input is rounded (math::half_input_bits: nearest even, fp16 clamped as HF clamps
// T5's fp16 hidden states) and read back exactly; the kernel is a template on this type, its
// scores, softmax and sums fp32 whichever it is.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

SEQPIPE_HD float cache_load(float x) {
  return x;
}
SEQPIPE_HD float cache_load(Bf16 x) {
  return bf16_float(x.bits);
}
SEQPIPE_HD float cache_load(F16 x) {
  return f16_float(x.bits);
}

SEQPIPE_HD void cache_store(float& slot, float x) {
  slot = x;
}
SEQPIPE_HD void cache_store(Bf16& slot, float x) {
  slot.bits = half_input_bits(x, false);
}
SEQPIPE_HD void cache_store(F16& slot, float x) {
  slot.bits = half_input_bits(x, true);
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
