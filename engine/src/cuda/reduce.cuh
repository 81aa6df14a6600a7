#pragma once
// The block-level pieces every CUDA kernel file shares: grid sizing and grid-stride indexing,
// warp and block reductions, the block's argmax, and the opt-in to more than 48 KiB of shared
// memory. Each is a template on the block size its kernel launches with (kThreads), so that a
// kernel file keeps its own launch shape and the reductions know their warp count at compile
// time. Device code only: included by src/cuda/*.cu.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/math.h"

namespace seqpipe::engine::cuda {

constexpr int kWarp = 32;

// Blocks of kThreads for n elements, at most 65535: the grid-stride loops cover the rest.
template <int kThreads>
int blocks_for(int64_t n) {
  static_assert(kThreads % kWarp == 0, "a block is whole warps");
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? blocks : 65535);
}

// A grid-stride loop: for (int64_t i = grid_first(); i < n; i += grid_stride()).
__device__ __forceinline__ int64_t grid_first() {
  return blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return int64_t{gridDim.x} * blockDim.x;
}

// The sum (or max) over groups of kLanes consecutive lanes (a power of two up to the warp),
// returned to every lane of the group. Every lane of the warp must call it.
template <bool kMax, int kLanes = kWarp>
__device__ __forceinline__ float lanes_reduce(float v) {
  static_assert(kLanes > 0 && kLanes <= kWarp && (kLanes & (kLanes - 1)) == 0);
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  return v;
}

// The sum (or max) of one value per thread of a kThreads-thread block, returned to every
// thread; scratch: kThreads / kWarp floats of shared memory, free again on return.
template <int kThreads, bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  static_assert(kThreads % kWarp == 0 && kThreads / kWarp <= kWarp);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = lanes_reduce<kMax>(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kThreads / kWarp ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  v = lanes_reduce<kMax>(v);
  __syncthreads();  // scratch may be reused by the next reduction
  return v;
}

// The block's best (value, index) pair by math::argmax_prefers (the larger value, the lower
// index among equals) from each thread's own, returned in value and index to every thread;
// values and indices: kThreads entries of shared memory, free again on return.
template <int kThreads>
__device__ void block_argmax(float& value, int64_t& index, float* values, int64_t* indices) {
  static_assert((kThreads & (kThreads - 1)) == 0, "the pair reduction halves the block");
  values[threadIdx.x] = value;
  indices[threadIdx.x] = index;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const int other = threadIdx.x + half;
      if (math::argmax_prefers(values[other], indices[other], values[threadIdx.x],
                               indices[threadIdx.x])) {
        values[threadIdx.x] = values[other];
        indices[threadIdx.x] = indices[other];
      }
    }
    __syncthreads();
  }
  value = values[0];
  index = indices[0];
  __syncthreads();  // every thread has read the result before the arrays are written again
}

// A kernel whose shared memory (static and dynamic, `total` bytes) passes the default 48 KiB
// must opt in to its `dynamic` bytes before it launches.
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, size_t total, size_t dynamic) {
  if (total > 48 * 1024) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(dynamic));
  }
}

}  // namespace seqpipe::engine::cuda
