#pragma once
// Half-precision conversions and the top-k's order of the CUDA kernels, written once for both sides
// as src/cuda/math.h is: the kernels call them on the device, the host reference and CI's tests on
// the CPU (tests/engine/fused_ops_test.cc checks them against the compiler's _Float16 and the CPU
// backend's to_bf16). Plain C++ without CUDA headers.
#include <cstdint>

#include "cuda/math.h"

namespace seqpipe::engine::cuda::math {

SEQPIPE_HD uint32_t float_bits(float x) {
  uint32_t bits;
  __builtin_memcpy(&bits, &x, sizeof bits);
  return bits;
}

SEQPIPE_HD float bits_float(uint32_t bits) {
  float x;
  __builtin_memcpy(&x, &bits, sizeof x);
  return x;
}

// fp32 -> IEEE binary16 bits, rounded to nearest even, as CUDA's __float2half_rn: past the
// largest half (65504) by half an ulp or more, infinity; a NaN, the quiet NaN 0x7fff.
SEQPIPE_HD uint16_t f16_bits(uint32_t bits) {
  const uint32_t sign = (bits >> 16) & 0x8000u, abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0x7fffu;
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (abs >= 0x38800000u) {  // a normal half (>= 2^-14): round at bit 13, rebias the exponent
    const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  if (abs <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: rounds to zero
  // A subnormal half: the significand in units of 2^-24, rounded to nearest even.
  const uint32_t exponent = abs >> 23, significand = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14..24
  uint32_t q = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// binary16 bits -> fp32, exact.
SEQPIPE_HD float f16_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
  return sign != 0 ? -magnitude : magnitude;
}

// bf16 bits -> fp32, exact.
SEQPIPE_HD float bf16_float(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

// T5 v1.0 in fp16 overflows: HF transformers clamps the hidden states after each layer of a
// block (models/t5/modeling_t5.py, T5Block.forward, "# clamp inf values to enable fp16
// training": when hidden_states is float16 and holds an inf, clamp_value =
// torch.finfo(hidden_states.dtype).max - 1000 and hidden_states = torch.clamp(hidden_states,
// -clamp_value, clamp_value)). The engine keeps its residual stream in fp32, so an fp16 value
// exists only where an activation is cast for a GEMM; there, a value that would round to an
// fp16 infinity (|x| >= 65520) becomes +-(65504 - 1000) instead, as HF's clamp makes that inf.
// One difference: HF's condition is over the whole tensor (any inf anywhere also lowers finite
// values in (64504, 65504] elsewhere in the batch); this one is per element, so a sequence's
// numbers do not depend on its neighbours in the batch. NaN stays NaN.
constexpr float kF16Max = 65504.0f;
constexpr float kF16Clamp = kF16Max - 1000.0f;

SEQPIPE_HD float f16_clamp(float x) {
  if (x >= 65520.0f) return kF16Clamp;
  if (x <= -65520.0f) return -kF16Clamp;
  return x;
}

// An activation as a half GEMM input: fp16 clamped (above) and rounded, or bf16 rounded.
SEQPIPE_HD uint16_t half_input_bits(float x, bool f16) {
  return f16 ? f16_bits(float_bits(f16_clamp(x))) : bf16_bits(float_bits(x));
}

// What a kernel writes for an activation: fp32, or the bits of a bf16 / fp16 half GEMM input.
enum class OutType { kF32, kBF16, kF16 };

// Element i of `out` (of `type`) <- v, rounded as half_input_bits for a half type.
SEQPIPE_HD void store_activation(void* out, int64_t i, float v, OutType type) {
  if (type == OutType::kF32) {
    static_cast<float*>(out)[i] = v;
  } else {
    static_cast<uint16_t*>(out)[i] = half_input_bits(v, type == OutType::kF16);
  }
}

// One log-softmax value: x - (max + log(sum of exp(x' - max))) over the row, all in fp32, in
// the order of the CPU's beam search (search.cc: row[t] -= log_sum_exp(row)).
SEQPIPE_HD float log_softmax_value(float x, float max_value, float log_sum) {
  return x - (max_value + log_sum);
}

// top_k_log_softmax's order: the larger value first, the lower index among equals (as
// argmax_prefers); a pass of its selection takes the best entry that comes after the one the
// previous pass took, which is what `after` says.
SEQPIPE_HD bool comes_after(float value, int64_t index, float previous, int64_t previous_index) {
  return argmax_prefers(previous, previous_index, value, index);
}

}  // namespace seqpipe::engine::cuda::math
