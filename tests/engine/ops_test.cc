// The CPU kernels against plain reference formulas, and T5's relative position buckets against
// values worked out from HF's _relative_position_bucket.
#include "ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "seqpipe/engine/model.h"

namespace seqpipe::engine {
namespace {

TEST(RelativePositionBucket, MatchesHuggingFaceFormula) {
  // Bidirectional, 32 buckets, max_distance 128: 16 per direction, exact below 8.
  EXPECT_EQ(relative_position_bucket(0, true, 32, 128), 0);
  EXPECT_EQ(relative_position_bucket(-3, true, 32, 128), 3);
  EXPECT_EQ(relative_position_bucket(3, true, 32, 128), 19);
  EXPECT_EQ(relative_position_bucket(-8, true, 32, 128), 8);
  EXPECT_EQ(relative_position_bucket(-16, true, 32, 128), 10);  // 8 + int(log(2)/log(16)*8) = 10
  EXPECT_EQ(relative_position_bucket(-127, true, 32, 128), 15);
  EXPECT_EQ(relative_position_bucket(500, true, 32, 128), 31);
  // Causal: future keys share bucket 0; 16 exact buckets.
  EXPECT_EQ(relative_position_bucket(5, false, 32, 128), 0);
  EXPECT_EQ(relative_position_bucket(-15, false, 32, 128), 15);
  EXPECT_EQ(relative_position_bucket(-32, false, 32, 128), 21);  // 16 + int(log(2)/log(8)*16) = 21
  EXPECT_EQ(relative_position_bucket(-1000, false, 32, 128), 31);
}

TEST(CpuKernels, RmsNormMatchesFormula) {
  Tensor w = Tensor::empty({5});
  float x[10], y[10];
  for (int i = 0; i < 5; ++i) w.data()[i] = 0.5f + 0.25f * i;
  for (int i = 0; i < 10; ++i) x[i] = std::sin(float(i)) * 3;
  ops::rms_norm(Device::kCpu, x, 2, w, 1e-6f, 2.0f, y);
  for (int r = 0; r < 2; ++r) {
    double ms = 0;
    for (int i = 0; i < 5; ++i) ms += double(x[r * 5 + i]) * x[r * 5 + i] / 5;
    for (int i = 0; i < 5; ++i) {
      EXPECT_NEAR(y[r * 5 + i], w.data()[i] * x[r * 5 + i] / std::sqrt(ms + 1e-6) * 2.0, 1e-5);
    }
  }
}

TEST(CpuKernels, GatedGeluMatchesTanhFormula) {
  float a[4] = {-3.0f, -0.5f, 0.0f, 2.0f}, b[4] = {1.0f, 2.0f, 3.0f, -1.0f};
  const float a0[4] = {-3.0f, -0.5f, 0.0f, 2.0f};
  ops::gated_gelu(Device::kCpu, a, b, 4);
  for (int i = 0; i < 4; ++i) {
    double x = a0[i];
    double g = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(a[i], g * b[i], 1e-6);
  }
}

TEST(CpuKernels, GatedGeluVectorisedExpStaysWithinBoundOverTheFloatRange) {
  // 16 lanes at a time plus a tail; inputs from deep negative (gelu -> -0) to large positive.
  std::vector<float> a, b;
  for (float x = -60.0f; x <= 60.0f; x += 0.0371f) a.push_back(x);
  for (size_t i = 0; i < a.size(); ++i) b.push_back(1.0f + 0.001f * float(i % 7));
  const std::vector<float> a0 = a;
  ops::gated_gelu(Device::kCpu, a.data(), b.data(), static_cast<int64_t>(a.size()));
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a0[i];
    const double g = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    // A few float ulps of the result, or 1e-7 near zero.
    EXPECT_NEAR(a[i], g * b[i], 1e-6 * std::max(1.0, std::abs(g * b[i]))) << "x " << x;
  }
}

TEST(CpuKernels, AttentionMatchesNaiveSoftmaxWithBiasAndCausalMask) {
  const int64_t heads = 2, hd = 4, inner = heads * hd, len = 5;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> q(len * inner), k(len * inner), v(len * inner), out(len * inner),
      scratch(static_cast<size_t>(len *
                                  ops::max_threads()));  // one row per thread, as the contract says
  for (auto* vec : {&q, &k, &v}) {
    for (auto& x : *vec) x = dist(rng);
  }
  PositionBias bias{Tensor::empty({heads, 2 * 3 + 1}), 3};
  for (int64_t i = 0; i < bias.table.numel(); ++i) bias.table.data()[i] = 0.1f * float(i);
  for (bool causal : {false, true}) {
    ops::AttentionSequence seq{q.data(), len, 0, k.data(), v.data(), len, out.data()};
    ops::AttentionArgs args{&seq,  1,      heads,          hd, inner, inner, inner,
                            &bias, causal, scratch.data(), len};
    ops::attention(Device::kCpu, args);
    for (int64_t i = 0; i < len; ++i) {
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<double> s;
        const int64_t kend = causal ? i + 1 : len;
        double mx = -1e30, total = 0;
        for (int64_t j = 0; j < kend; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d)
            dot += double(q[i * inner + h * hd + d]) * k[j * inner + h * hd + d];
          const int64_t rel = std::clamp<int64_t>(j - i, -3, 3);
          dot += bias.table.row(h)[rel + 3];
          s.push_back(dot);
          mx = std::max(mx, dot);
        }
        for (auto& x : s) total += (x = std::exp(x - mx));
        for (int64_t d = 0; d < hd; ++d) {
          double want = 0;
          for (int64_t j = 0; j < kend; ++j)
            want += s[size_t(j)] / total * v[j * inner + h * hd + d];
          EXPECT_NEAR(out[i * inner + h * hd + d], want, 1e-5)
              << "causal " << causal << " row " << i;
        }
      }
    }
  }
}

TEST(Ops, UnsupportedDeviceIsAnErrorNotACrash) {
  Tensor w = Tensor::empty({2, 2});
  float x[2] = {1, 2}, y[2];
  const LinearWeight lw = ops::prepare_linear(Device::kCpu, w, ComputeType::kFloat32, {});
  EXPECT_THROW(ops::linear(Device::kCuda, x, 1, lw, y), std::exception);
}

}  // namespace
}  // namespace seqpipe::engine
