// RMSNorm, the FFN's activation and the activations' cast, each writing the next GEMM's input in
// its own type (src/cuda/norm_cast.h): one kernel where there were two (the op, then the cast),
// and half the bytes written. The arithmetic is src/cuda/math.h's and src/cuda/half_math.h's.
#include <cstdint>

#include "cuda/half_math.h"
#include "cuda/math.h"
#include "cuda/norm_cast.h"

namespace seqpipe::engine::cuda {

namespace {

constexpr int kThreads = 256;  // per block, a multiple of the warp
constexpr int kWarp = 32;

int blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? blocks : 65535);  // grid-stride loops cover the rest
}

__device__ void store(void* out, int64_t i, float v, OutType type) {
  if (type == OutType::kF32) {
    static_cast<float*>(out)[i] = v;
  } else {
    static_cast<uint16_t*>(out)[i] = math::half_input_bits(v, type == OutType::kF16);
  }
}

// The sum of one value per thread of the block, returned to every thread.
__device__ float block_sum(float v, float* scratch) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / kWarp) ? scratch[lane] : 0.0f;
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void rms_norm_to_kernel(const float* x, int64_t d, const float* w, float eps,
                                   float scale, void* y, OutType type) {
  __shared__ float scratch[kWarp];
  const float* xr = x + blockIdx.x * d;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) sum += xr[i] * xr[i];
  const float inverse = math::rms_inverse(block_sum(sum, scratch), d, eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    store(y, blockIdx.x * d + i, math::rms_norm_value(xr[i], w[i], inverse, scale), type);
}

__global__ void activation_to_kernel(const float* a, const float* b, int64_t n, void* y,
                                     OutType type) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    store(y, i, b != nullptr ? math::gated_gelu(a[i], b[i]) : math::relu(a[i]), type);
}

__global__ void to_half_input_kernel(const float* x, int64_t n, uint16_t* out, bool f16) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = math::half_input_bits(x[i], f16);
}

}  // namespace

void launch_rms_norm_to(const float* x, int64_t m, int64_t d, const float* w, float eps,
                        float scale, void* y, OutType type, cudaStream_t stream) {
  rms_norm_to_kernel<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, d, w, eps, scale, y,
                                                                        type);
}

void launch_activation_to(const float* a, const float* b, int64_t n, void* y, OutType type,
                          cudaStream_t stream) {
  activation_to_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, b, n, y, type);
}

void launch_to_half_input(const float* x, int64_t n, uint16_t* out, bool f16, cudaStream_t stream) {
  to_half_input_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, out, f16);
}

}  // namespace seqpipe::engine::cuda
