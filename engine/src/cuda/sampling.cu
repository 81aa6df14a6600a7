// The lm_head's top-k with log-softmax on the device (src/cuda/sampling.h): a block per row
// finds the row's max and sum of exponentials (fp32), then k passes each reduce the block to
// the best entry after the previous pass's (math::comes_after), so nothing is sorted or stored
// per token. k <= 32 passes over a 32k vocabulary read the row from L2 after the first.
#include <cstdint>

#include "cuda/half_math.h"
#include "cuda/math.h"
#include "cuda/reduce.cuh"
#include "cuda/sampling.h"

namespace seqpipe::engine::cuda {

namespace {

constexpr int kThreads = 256;  // per block, a power of two (the pair reduction halves it)

__global__ void top_k_log_softmax_kernel(const float* logits, int64_t vocab, int k, int* ids,
                                         float* logprobs) {
  __shared__ float values[kThreads];
  __shared__ int64_t indices[kThreads];
  __shared__ float scratch[kWarp];
  const float* row = logits + blockIdx.x * vocab;
  float local = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) local = fmaxf(local, row[i]);
  const float max_value = block_reduce<kThreads, true>(local, scratch);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
    sum += math::softmax_weight(row[i], max_value);
  const float log_sum = logf(block_reduce<kThreads, false>(sum, scratch));
  float previous = INFINITY;
  int64_t previous_index = -1;
  for (int j = 0; j < k; ++j) {
    float best = -INFINITY;
    int64_t best_index = vocab;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      if (math::comes_after(row[i], i, previous, previous_index) &&
          math::argmax_prefers(row[i], i, best, best_index)) {
        best = row[i];
        best_index = i;
      }
    }
    block_argmax<kThreads>(best, best_index, values, indices);
    previous = best;
    previous_index = best_index;
    if (threadIdx.x == 0) {
      const bool found = previous_index < vocab;
      ids[blockIdx.x * k + j] = found ? static_cast<int>(previous_index) : -1;
      logprobs[blockIdx.x * k + j] =
          found ? math::log_softmax_value(previous, max_value, log_sum) : -INFINITY;
    }
  }
}

}  // namespace

void launch_top_k_log_softmax(const float* logits, int64_t rows, int64_t vocab, int k, int* ids,
                              float* logprobs, cudaStream_t stream) {
  top_k_log_softmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, k,
                                                                                 ids, logprobs);
}

}  // namespace seqpipe::engine::cuda
