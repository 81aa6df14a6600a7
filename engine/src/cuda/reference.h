#pragma once
// The CUDA kernels' host twins: each loops over what its kernel's threads and blocks cover and
// computes every element with the same src/cuda/math.h functions, in the order the kernel does
// (a block's reductions become serial sums). CI has no GPU: it checks these against the CPU
// backend (tests/engine/cuda_reference_test.cc), and a GPU run checks the kernels against the
// CPU backend too, so a kernel and its twin differ only in launch, indexing and summation order.
#include <cstdint>

#include "ops.h"

namespace seqpipe::engine::cuda::reference {

// src/cuda/norm_cast.cu's rms_norm kernel writing fp32.
void rms_norm(const float* x, int64_t m, int64_t d, const float* w, float eps, float scale,
              float* y);
void embedding(const int* ids, int64_t n, const float* table, int64_t d, float* out);
void relu(float* x, int64_t n);
void gated_gelu(float* a, const float* b, int64_t n);
void to_bf16(const float* x, int64_t n, uint16_t* out);
// Host views, as the ops take them (the workspace is not used: the kernel keeps its scores in
// shared memory). The outputs f32, or bf16 / fp16 (the o GEMM's half input:
// math::store_activation).
void attention(const ops::AttentionArgs& args);
void argmax(const float* logits, int64_t rows, int64_t vocab, const int* banned, int* ids);
// The fused decode-step kernel (src/cuda/attention.cu): one query row per sequence, a
// `threads`-thread block per (head, sequence) as launched; k and v f32, or bf16 / f16 (the
// kernel's half-cache instances: math::cache_store / cache_load).
void decode_attention(const ops::AttentionArgs& args, int threads = 128);

}  // namespace seqpipe::engine::cuda::reference
