// The fused decode-step attention kernel: a block per (head, sequence), as FasterTransformer's
// decoder masked multi-head attention. The block writes its head's slice of the step's key and
// value into the cache (no other block reads that slice), then scores every key it sees with a
// group of kKeyLanes lanes per key, takes the softmax in fp32 and sums the values with the
// block's threads split over the head's dimensions and `value_parts` groups of keys. The cache
// is fp32, bf16 or fp16 (a kernel instance each): half the bytes read per key in half.
// src/cuda/reference.cc's decode_attention is its host twin.
#include <algorithm>
#include <cstdint>

#include "cuda/attention.h"
#include "cuda/attention_math.h"
#include "cuda/reduce.cuh"

namespace seqpipe::engine::cuda {

namespace {

constexpr int kThreads = 128;  // per block: four warps
constexpr int kPartials = kThreads > kMaxHeadDim ? kThreads : kMaxHeadDim;

// The block's head slice of the step's key and value into cache row q_pos; visible to the
// block's threads after the caller's __syncthreads.
template <typename Cache>
__device__ void append_head(const AttentionJob& job, int64_t head, int64_t d) {
  Cache* k = static_cast<Cache*>(job.k);
  Cache* v = static_cast<Cache*>(job.v);
  const int64_t row = job.q_pos * job.kv_stride + head * d;
  for (int64_t i = threadIdx.x; i < d; i += kThreads) {
    math::cache_store(k[row + i], job.new_k[head * d + i]);
    math::cache_store(v[row + i], job.new_v[head * d + i]);
  }
}

// scores[j] = q . k_j (+ bias) for the keys the query sees; returns after a __syncthreads.
template <typename Cache>
__device__ void score_keys(const Cache* k, int64_t kv_stride, const float* query, int64_t keys,
                           int64_t position, const float* bias_row, int64_t max_distance, int64_t d,
                           float* scores) {
  constexpr int kGroups = kThreads / math::kKeyLanes;
  const int group = threadIdx.x / math::kKeyLanes, lane = threadIdx.x % math::kKeyLanes;
  // Every lane runs every round (the shuffles need the whole warp); a lane past the keys adds 0.
  for (int64_t first = 0; first < keys; first += kGroups) {
    const int64_t j = first + group;
    float dot = 0.0f;
    if (j < keys) {
      const Cache* key = k + j * kv_stride;
      for (int64_t i = lane; i < d; i += math::kKeyLanes)
        dot += query[i] * math::cache_load(key[i]);
    }
    dot = lanes_reduce<false, math::kKeyLanes>(dot);
    if (lane == 0 && j < keys)
      scores[j] = math::biased_score(dot, bias_row, j, position, max_distance);
  }
  __syncthreads();
}

template <typename Cache>
__global__ void decode_attention_kernel(const AttentionJob* jobs, AttentionShape shape) {
  extern __shared__ float scores[];
  __shared__ float query[kMaxHeadDim];
  __shared__ float partials[kPartials];
  __shared__ float scratch[kWarp];
  const AttentionJob& job = jobs[blockIdx.y];
  const int64_t head = blockIdx.x, d = shape.head_dim, position = job.q_pos;
  if (shape.append && job.new_k != nullptr) append_head<Cache>(job, head, d);
  for (int64_t i = threadIdx.x; i < d; i += kThreads) query[i] = job.q[head * d + i];
  __syncthreads();

  const int64_t keys = math::keys_seen(job.k_rows, position, shape.causal);
  const float* bias_row =
      shape.bias == nullptr ? nullptr : shape.bias + head * (2 * shape.max_distance + 1);
  const Cache* k = static_cast<const Cache*>(job.k) + head * d;
  score_keys<Cache>(k, job.kv_stride, query, keys, position, bias_row, shape.max_distance, d,
                    scores);
  float local_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < keys; j += kThreads) local_max = fmaxf(local_max, scores[j]);
  const float max_score = block_reduce<kThreads, true>(local_max, scratch);
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < keys; j += kThreads) {
    scores[j] = math::softmax_weight(scores[j], max_score);
    local_sum += scores[j];
  }
  const float inverse =
      1.0f / block_reduce<kThreads, false>(local_sum, scratch);  // syncs: scores are set

  // Values: thread t sums dimension t % d over keys part, part + parts, ... (part = t / d).
  const Cache* v = static_cast<const Cache*>(job.v) + head * d;
  const int parts = math::value_parts(kThreads, d);
  const int part = d <= kThreads ? static_cast<int>(threadIdx.x / d) : 0;
  if (part < parts) {
    for (int64_t i = d <= kThreads ? threadIdx.x % d : threadIdx.x; i < d; i += kThreads) {
      float sum = 0.0f;
      for (int64_t j = part; j < keys; j += parts)
        sum += scores[j] * math::cache_load(v[j * job.kv_stride + i]);
      partials[part * d + i] = sum;
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < d; i += kThreads) {
    float sum = 0.0f;
    for (int p = 0; p < parts; ++p) sum += partials[p * d + i];
    math::store_activation(job.out, head * d + i, sum * inverse, shape.out_type);
  }
}

}  // namespace

size_t decode_attention_shared_bytes(int64_t max_k_rows) {
  return static_cast<size_t>(max_k_rows) * sizeof(float) +
         (kMaxHeadDim + kPartials + kWarp) * sizeof(float);
}

template <typename Cache>
void launch_decode(const AttentionJob* jobs, const AttentionShape& shape, cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(shape.max_k_rows) * sizeof(float);  // the scores
  allow_shared_bytes(decode_attention_kernel<Cache>,
                     decode_attention_shared_bytes(shape.max_k_rows), shared);
  const dim3 grid(static_cast<unsigned>(shape.num_heads), static_cast<unsigned>(shape.num_seqs));
  decode_attention_kernel<Cache><<<grid, kThreads, shared, stream>>>(jobs, shape);
}

void launch_decode_attention(const AttentionJob* jobs, const AttentionShape& shape, CacheType cache,
                             cudaStream_t stream) {
  switch (cache) {
    case CacheType::kF32:
      return launch_decode<float>(jobs, shape, stream);
    case CacheType::kBF16:
      return launch_decode<math::Bf16>(jobs, shape, stream);
    case CacheType::kF16:
      return launch_decode<math::F16>(jobs, shape, stream);
  }
}

}  // namespace seqpipe::engine::cuda
