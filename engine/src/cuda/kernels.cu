// The CUDA kernels: each is a launch, its indexing and its reductions around src/cuda/math.h's
// arithmetic (src/cuda/reference.cc is the host twin of each).
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/kernels.h"
#include "cuda/math.h"
#include "cuda/reduce.cuh"

namespace seqpipe::engine::cuda {

namespace {

constexpr int kThreads = 256;  // per block, a multiple of the warp

__global__ void embedding_kernel(const int* ids, const float* table, int64_t d, float* out) {
  const float* src = table + static_cast<int64_t>(ids[blockIdx.x]) * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) out[blockIdx.x * d + i] = src[i];
}

__global__ void relu_kernel(float* x, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) x[i] = math::relu(x[i]);
}

__global__ void gated_gelu_kernel(float* a, const float* b, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) a[i] = math::gated_gelu(a[i], b[i]);
}

__global__ void to_bf16_kernel(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = grid_first(); i < n; i += grid_stride())
    out[i] = math::bf16_bits(__float_as_uint(x[i]));
}

__global__ void to_f16_kernel(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = grid_first(); i < n; i += grid_stride())
    out[i] = __half_as_ushort(__float2half_rn(x[i]));
}

// A decoder step's new key and value rows join the cache before any block reads it.
__global__ void append_kv_kernel(const AttentionJob* jobs, int64_t width) {
  const AttentionJob& job = jobs[blockIdx.y];
  if (job.new_k == nullptr || blockIdx.x >= job.q_rows) return;
  const int64_t row = blockIdx.x;
  float* k = static_cast<float*>(job.k) + (job.q_pos + row) * job.kv_stride;
  float* v = static_cast<float*>(job.v) + (job.q_pos + row) * job.kv_stride;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    k[i] = job.new_k[row * width + i];
    v[i] = job.new_v[row * width + i];
  }
}

// Block (head, query row, sequence): the scores of every key the query sees (a warp per key,
// its lanes over the head's dimensions) into shared memory, their softmax, then the weighted
// sum of the values (a thread per dimension).
__global__ void attention_kernel(const AttentionJob* jobs, AttentionShape shape) {
  extern __shared__ float scores[];
  __shared__ float query[kMaxHeadDim];
  __shared__ float scratch[kWarp];
  const AttentionJob& job = jobs[blockIdx.z];
  const int64_t head = blockIdx.x, row = blockIdx.y, d = shape.head_dim;
  if (row >= job.q_rows) return;  // the whole block leaves together
  const int64_t position = job.q_pos + row;
  const int64_t keys = math::keys_seen(job.k_rows, position, shape.causal);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    query[i] = job.q[row * job.q_stride + head * d + i];
  __syncthreads();

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const int64_t bias_width = 2 * shape.max_distance + 1;
  for (int64_t j = warp; j < keys; j += warps) {
    const float* k = static_cast<const float*>(job.k) + j * job.kv_stride + head * d;
    float dot = 0.0f;
    for (int64_t i = lane; i < d; i += kWarp) dot += query[i] * k[i];
    dot = lanes_reduce<false>(dot);
    if (lane == 0) {
      if (shape.bias != nullptr)
        dot += shape.bias[head * bias_width + math::bias_column(j, position, shape.max_distance)];
      scores[j] = dot;
    }
  }
  __syncthreads();
  float local_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) local_max = fmaxf(local_max, scores[j]);
  const float max_score = block_reduce<kThreads, true>(local_max, scratch);
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    scores[j] = math::softmax_weight(scores[j], max_score);
    local_sum += scores[j];
  }
  const float inverse =
      1.0f / block_reduce<kThreads, false>(local_sum, scratch);  // syncs: scores are set
  const int64_t out = row * job.out_stride + head * d;
  const float* v = static_cast<const float*>(job.v) + head * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float sum = 0.0f;
    for (int64_t j = 0; j < keys; ++j) sum += scores[j] * v[j * job.kv_stride + i];
    math::store_activation(job.out, out + i, sum * inverse, shape.out_type);
  }
}

// A block per job (looping when there are more jobs than blocks); 16 bytes a thread at a time
// where both ends allow it.
__global__ void copy_all_kernel(const CopyJob* jobs, int64_t count) {
  for (int64_t j = blockIdx.x; j < count; j += gridDim.x) {
    const CopyJob job = jobs[j];
    const auto dst = reinterpret_cast<uintptr_t>(job.dst),
               src = reinterpret_cast<uintptr_t>(job.src);
    if ((dst | src | static_cast<uintptr_t>(job.bytes)) % sizeof(int4) == 0) {
      const int64_t n = job.bytes / static_cast<int64_t>(sizeof(int4));
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        static_cast<int4*>(job.dst)[i] = static_cast<const int4*>(job.src)[i];
    } else {
      for (int64_t i = threadIdx.x; i < job.bytes; i += blockDim.x)
        static_cast<char*>(job.dst)[i] = static_cast<const char*>(job.src)[i];
    }
  }
}

// Block per row: each thread's first maximum over its stride, then the block's, pairs compared
// by math::argmax_prefers so that the lowest index wins among equals.
__global__ void argmax_kernel(const float* logits, int64_t vocab, const int* banned, int* ids) {
  __shared__ float values[kThreads];
  __shared__ int64_t indices[kThreads];
  const float* row = logits + blockIdx.x * vocab;
  const int64_t ban = banned[blockIdx.x];
  float best = -INFINITY;
  int64_t best_index = vocab;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (i != ban && math::argmax_prefers(row[i], i, best, best_index)) {
      best = row[i];
      best_index = i;
    }
  }
  block_argmax<kThreads>(best, best_index, values, indices);
  if (threadIdx.x == 0) ids[blockIdx.x] = static_cast<int>(best_index < vocab ? best_index : 0);
}

}  // namespace

void launch_embedding(const int* ids, int64_t n, const float* table, int64_t d, float* out,
                      cudaStream_t stream) {
  embedding_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(ids, table, d, out);
}

void launch_relu(float* x, int64_t n, cudaStream_t stream) {
  relu_kernel<<<blocks_for<kThreads>(n), kThreads, 0, stream>>>(x, n);
}

void launch_gated_gelu(float* a, const float* b, int64_t n, cudaStream_t stream) {
  gated_gelu_kernel<<<blocks_for<kThreads>(n), kThreads, 0, stream>>>(a, b, n);
}

void launch_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  to_bf16_kernel<<<blocks_for<kThreads>(n), kThreads, 0, stream>>>(x, n, out);
}

void launch_to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  to_f16_kernel<<<blocks_for<kThreads>(n), kThreads, 0, stream>>>(x, n, out);
}

size_t attention_shared_bytes(int64_t max_k_rows) {
  return static_cast<size_t>(max_k_rows) * sizeof(float) + (kMaxHeadDim + kWarp) * sizeof(float);
}

void launch_attention(const AttentionJob* jobs, const AttentionShape& shape, cudaStream_t stream) {
  const dim3 append_grid(static_cast<unsigned>(shape.max_q_rows),
                         static_cast<unsigned>(shape.num_seqs));
  if (shape.append) {
    append_kv_kernel<<<append_grid, kThreads, 0, stream>>>(jobs, shape.num_heads * shape.head_dim);
  }
  const size_t shared = static_cast<size_t>(shape.max_k_rows) * sizeof(float);  // the scores
  allow_shared_bytes(attention_kernel, attention_shared_bytes(shape.max_k_rows), shared);
  const dim3 grid(static_cast<unsigned>(shape.num_heads), static_cast<unsigned>(shape.max_q_rows),
                  static_cast<unsigned>(shape.num_seqs));
  attention_kernel<<<grid, kThreads, shared, stream>>>(jobs, shape);
}

void launch_copy_all(const CopyJob* jobs, int64_t count, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(count, 65535));
  copy_all_kernel<<<blocks, kThreads, 0, stream>>>(jobs, count);
}

void launch_argmax(const float* logits, int64_t rows, int64_t vocab, const int* banned, int* ids,
                   cudaStream_t stream) {
  argmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, banned, ids);
}

}  // namespace seqpipe::engine::cuda
