#include "cuda/fused_reference.h"

#include <cmath>

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

void top_k_log_softmax(const float* logits, int64_t rows, int64_t vocab, int k, int* ids,
                       float* logprobs) {
  for (int64_t r = 0; r < rows; ++r) {  // a block per row
    const float* row = logits + r * vocab;
    float max_value = -INFINITY;
    for (int64_t i = 0; i < vocab; ++i) max_value = std::fmax(max_value, row[i]);
    float sum = 0.0f;
    for (int64_t i = 0; i < vocab; ++i) sum += math::softmax_weight(row[i], max_value);
    const float log_sum = logf(sum);
    float previous = INFINITY;
    int64_t previous_index = -1;
    for (int j = 0; j < k; ++j) {
      float best = -INFINITY;
      int64_t best_index = vocab;
      for (int64_t i = 0; i < vocab; ++i) {
        if (math::comes_after(row[i], i, previous, previous_index) &&
            math::argmax_prefers(row[i], i, best, best_index)) {
          best = row[i];
          best_index = i;
        }
      }
      const bool found = best_index < vocab;
      ids[r * k + j] = found ? static_cast<int>(best_index) : -1;
      logprobs[r * k + j] = found ? math::log_softmax_value(best, max_value, log_sum) : -INFINITY;
      previous = best;
      previous_index = best_index;
    }
  }
}

}  // namespace seqpipe::engine::cuda::reference
