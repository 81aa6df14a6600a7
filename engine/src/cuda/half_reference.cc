#include "cuda/half_reference.h"

#include "cuda/half_math.h"
#include "cuda/math.h"

namespace seqpipe::engine::cuda::reference {

void rms_norm_half(const float* x, int64_t m, int64_t d, const float* w, float eps, float scale,
                   uint16_t* y, bool f16) {
  for (int64_t r = 0; r < m; ++r) {  // a block per row
    const float* xr = x + r * d;
    float sum = 0.0f;
    for (int64_t i = 0; i < d; ++i) sum += xr[i] * xr[i];
    const float inverse = math::rms_inverse(sum, d, eps);
    for (int64_t i = 0; i < d; ++i) {
      y[r * d + i] = math::half_input_bits(math::rms_norm_value(xr[i], w[i], inverse, scale), f16);
    }
  }
}

void activation_half(const float* a, const float* b, int64_t n, uint16_t* y, bool f16) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] =
        math::half_input_bits(b != nullptr ? math::gated_gelu(a[i], b[i]) : math::relu(a[i]), f16);
  }
}

void to_half_input(const float* x, int64_t n, uint16_t* out, bool f16) {
  for (int64_t i = 0; i < n; ++i) out[i] = math::half_input_bits(x[i], f16);
}

}  // namespace seqpipe::engine::cuda::reference
