// RMSNorm, the FFN's activation and the activations' cast, each writing the next GEMM's input in
// its own type (src/cuda/norm_cast.h): one kernel where there were two (the op, then the cast),
// and half the bytes written. The arithmetic is src/cuda/math.h's and src/cuda/half_math.h's.
#include <cstdint>

#include "cuda/half_math.h"
#include "cuda/math.h"
#include "cuda/norm_cast.h"
#include "cuda/reduce.cuh"

namespace seqpipe::engine::cuda {

namespace {

constexpr int kThreads = 256;  // per block, a multiple of the warp

__global__ void rms_norm_to_kernel(const float* x, int64_t d, const float* w, float eps,
                                   float scale, void* y, OutType type) {
  __shared__ float scratch[kWarp];
  const float* xr = x + blockIdx.x * d;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) sum += xr[i] * xr[i];
  const float inverse = math::rms_inverse(block_reduce<kThreads, false>(sum, scratch), d, eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    math::store_activation(y, blockIdx.x * d + i, math::rms_norm_value(xr[i], w[i], inverse, scale),
                           type);
}

__global__ void activation_to_kernel(const float* a, const float* b, int64_t n, void* y,
                                     OutType type) {
  for (int64_t i = grid_first(); i < n; i += grid_stride())
    math::store_activation(y, i, b != nullptr ? math::gated_gelu(a[i], b[i]) : math::relu(a[i]),
                           type);
}

__global__ void to_half_input_kernel(const float* x, int64_t n, uint16_t* out, bool f16) {
  for (int64_t i = grid_first(); i < n; i += grid_stride())
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
  activation_to_kernel<<<blocks_for<kThreads>(n), kThreads, 0, stream>>>(a, b, n, y, type);
}

void launch_to_half_input(const float* x, int64_t n, uint16_t* out, bool f16, cudaStream_t stream) {
  to_half_input_kernel<<<blocks_for<kThreads>(n), kThreads, 0, stream>>>(x, n, out, f16);
}

}  // namespace seqpipe::engine::cuda
