#include "cpu/kernels.h"

#include <cmath>
#include <cstring>

namespace seqpipe::engine::cpu {

void rms_norm(const float* x, int64_t m, int64_t d, const float* w, float eps, float scale, float* y) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < d; ++i) sum += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(d) + eps);
    if (scale == 1.0f) {
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) yr[i] = w[i] * (xr[i] * inv);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) yr[i] = w[i] * (xr[i] * inv) * scale;
    }
  }
}

void embedding(const int* ids, int64_t n, const float* table, int64_t d, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * d, table + static_cast<int64_t>(ids[i]) * d, static_cast<size_t>(d) * sizeof(float));
  }
}

void relu(float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void gated_gelu(float* a, const float* b, int64_t n) {
  // gelu_new (HF NewGELUActivation): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i];
    const float g = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
    a[i] = g * b[i];
  }
}

void attention(const ops::AttentionArgs& args) {
  const int64_t hd = args.head_dim;
  float* scores = args.scratch;
  for (int64_t s = 0; s < args.num_seqs; ++s) {
    const ops::AttentionSequence& seq = args.seqs[s];
    for (int64_t r = 0; r < seq.q_rows; ++r) {
      const int64_t qpos = seq.q_pos + r;
      const int64_t kend = args.causal ? std::min(seq.k_rows, qpos + 1) : seq.k_rows;
      for (int64_t h = 0; h < args.num_heads; ++h) {
        const float* q = seq.q + r * args.q_stride + h * hd;
        const float* bias_row = args.bias ? args.bias->table.row(h) + args.bias->max_distance : nullptr;
        float max_score = -INFINITY;
        for (int64_t j = 0; j < kend; ++j) {
          const float* k = seq.k + j * args.kv_stride + h * hd;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int64_t i = 0; i < hd; ++i) dot += q[i] * k[i];
          if (bias_row) {
            int64_t rel = j - qpos;
            rel = rel < -args.bias->max_distance ? -args.bias->max_distance
                  : rel > args.bias->max_distance ? args.bias->max_distance
                                                  : rel;
            dot += bias_row[rel];
          }
          scores[j] = dot;
          max_score = dot > max_score ? dot : max_score;
        }
        float total = 0.0f;
        for (int64_t j = 0; j < kend; ++j) {
          scores[j] = std::exp(scores[j] - max_score);
          total += scores[j];
        }
        const float inv_total = 1.0f / total;
        float* out = seq.out + r * args.out_stride + h * hd;
        std::memset(out, 0, static_cast<size_t>(hd) * sizeof(float));
        for (int64_t j = 0; j < kend; ++j) {
          const float p = scores[j] * inv_total;
          const float* v = seq.v + j * args.kv_stride + h * hd;
#pragma omp simd
          for (int64_t i = 0; i < hd; ++i) out[i] += p * v[i];
        }
      }
    }
  }
}

}  // namespace seqpipe::engine::cpu
