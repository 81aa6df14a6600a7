#pragma once
// Launchers of the lm_head's choices on the device (src/cuda/sampling.cu), for
// src/cuda/backend.cu; their host twins are in src/cuda/fused_reference.h. Device pointers,
// queued on `stream`.
#include <cuda_runtime.h>

#include <cstdint>

namespace seqpipe::engine::cuda {

// ops::top_k_log_softmax into device ids / logprobs of rows x k entries; a block per row.
void launch_top_k_log_softmax(const float* logits, int64_t rows, int64_t vocab, int k, int* ids,
                              float* logprobs, cudaStream_t stream);

}  // namespace seqpipe::engine::cuda
