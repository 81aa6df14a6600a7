#pragma once
// The CUDA kernels' launchers (src/cuda/kernels.cu), for src/cuda/backend.cu. Every pointer is
// device memory; every launch is queued on `stream`. The arithmetic is src/cuda/math.h's, and
// src/cuda/reference.h is each kernel's host twin.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/half_math.h"

namespace seqpipe::engine::cuda {

void launch_embedding(const int* ids, int64_t n, const float* table, int64_t d, float* out,
                      cudaStream_t stream);
void launch_relu(float* x, int64_t n, cudaStream_t stream);
void launch_gated_gelu(float* a, const float* b, int64_t n, cudaStream_t stream);
// fp32 -> bf16 (bits) or fp16, for the GEMMs' inputs.
void launch_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);
void launch_to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);

// One sequence of an attention call, as the kernel reads it (ops::AttentionSequence with the
// views reduced to pointers and strides).
// k and v: the cache's elements, fp32 for launch_attention, fp32, bf16 or fp16 for the decode
// kernel (src/cuda/attention.h); written where a job appends. out: AttentionShape::out_type's.
struct AttentionJob {
  const float* q;
  void* k;
  void* v;
  void* out;
  const float* new_k;  // null: nothing to append
  const float* new_v;
  int64_t q_rows, q_pos, k_rows;
  int64_t q_stride, kv_stride, out_stride;
};

struct AttentionShape {
  int64_t num_seqs, num_heads, head_dim;
  int64_t max_q_rows, max_k_rows;  // over the jobs: the grid and the shared memory
  const float* bias;               // [num_heads, 2 * max_distance + 1], or null
  int64_t max_distance;
  bool causal;
  bool append = false;  // a job has new K/V rows to append first (else no append launch)
  // The jobs' out: fp32, or the o GEMM's half input (ops::linear_input_type), so that no cast
  // runs between the attention and its output projection.
  math::OutType out_type = math::OutType::kF32;
};

// The largest head_dim the kernel takes (its query row lives in shared memory).
constexpr int64_t kMaxHeadDim = 256;
// Shared memory the attention kernel needs for `max_k_rows` keys: its scores (dynamic) and its
// query row and reduction scratch (static).
size_t attention_shared_bytes(int64_t max_k_rows);
void launch_attention(const AttentionJob* jobs, const AttentionShape& shape, cudaStream_t stream);

// One copy of launch_copy_all: `bytes` from src to dst.
struct CopyJob {
  void* dst;
  const void* src;
  int64_t bytes;
};
void launch_copy_all(const CopyJob* jobs, int64_t count, cudaStream_t stream);

void launch_argmax(const float* logits, int64_t rows, int64_t vocab, const int* banned, int* ids,
                   cudaStream_t stream);

}  // namespace seqpipe::engine::cuda
