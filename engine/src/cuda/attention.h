#pragma once
// The fused decode-step attention kernel's launcher (src/cuda/attention.cu), for
// src/cuda/backend.cu: FasterTransformer's "decoder masked multi-head attention" shape. One
// launch covers every sequence (one query row each) and head: the step's key and value join
// the cache, then the scores with T5's position bias (self-attention; none across), the fp32
// softmax and the weighted sum of the values. Cross-attention is the same launch without the
// append and the bias.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels.h"

namespace seqpipe::engine::cuda {

// Shared memory the decode kernel needs for `max_k_rows` keys: the scores (dynamic) and the
// query, the value partial sums and the reductions' scratch (static).
size_t decode_attention_shared_bytes(int64_t max_k_rows);

// The KV cache's element type: fp32, or the bits of a bf16 / fp16 cache (ops::kv_cache_type),
// each read by its own instance of the kernel (src/cuda/attention_math.h's cache_load /
// cache_store); scores, softmax and sums are fp32 in all three.
enum class CacheType { kF32, kBF16, kF16 };

// jobs: one per sequence, q_rows 1 (src/ops.cc checked), in device memory, every job's k and v
// in `cache`'s type; shape.append: the jobs' new_k / new_v (fp32) are stored to row q_pos of k
// and v first.
void launch_decode_attention(const AttentionJob* jobs, const AttentionShape& shape, CacheType cache,
                             cudaStream_t stream);

}  // namespace seqpipe::engine::cuda
