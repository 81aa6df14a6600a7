#pragma once
// Launchers of the kernels that write a GEMM's input in its half type directly (src/cuda/
// norm_cast.cu): RMSNorm, the FFN's activation and the plain cast, each one kernel, each with
// its host twin in src/cuda/fused_reference.h and its per-element arithmetic in
// src/cuda/half_math.h. Every pointer is device memory; every launch is queued on `stream`.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/half_math.h"

namespace seqpipe::engine::cuda {

// What a kernel writes: fp32, or bf16 / fp16 bits (fp16 clamped as math::f16_clamp says).
using math::OutType;

// y = rms_norm(x) (T5LayerNorm, math::rms_norm_value) in `type`, a block per row.
void launch_rms_norm_to(const float* x, int64_t m, int64_t d, const float* w, float eps,
                        float scale, void* y, OutType type, cudaStream_t stream);
// y = relu(a) (b null) or gated_gelu(a, b), in `type`; y may be a when fp32.
void launch_activation_to(const float* a, const float* b, int64_t n, void* y, OutType type,
                          cudaStream_t stream);
// out = x as a half GEMM input (math::half_input_bits).
void launch_to_half_input(const float* x, int64_t n, uint16_t* out, bool f16, cudaStream_t stream);

}  // namespace seqpipe::engine::cuda
