// Activations written in the next GEMM's half type (ops::linear_input_type, rms_norm into a half
// y, ops::feed_forward_activation), the half conversions and HF's fp16 clamp of
// src/cuda/half_math.h, the profiler's device time, and Q/K/V as one GEMM read in place. The host
// math and the kernels' host twins are checked against the compiler's _Float16 and the CPU backend
// on every machine; the ops run on every device this build has (the GPU's instances skip themselves
// without one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/kernels.h"
#include "cuda/fused_reference.h"
#include "cuda/half_math.h"
#include "ops.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/model.h"
#include "seqpipe/engine/profiler.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

namespace math = cuda::math;
using test::random_values;

uint16_t compiler_f16_bits(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

TEST(CudaHalfMath, F16RoundingMatchesTheCompilersFloat16) {
  std::vector<float> values = {0.0f,          -0.0f,         1.0f,       65504.0f,  65519.99f,
                               65520.0f,      -65520.0f,     1e30f,      INFINITY,  -INFINITY,
                               6.1035156e-5f, 6.1031434e-5f, 5.96e-8f,   2.98e-8f,  2.9802322e-8f,
                               2.9802326e-8f, 1e-10f,        1.0004883f, 1.0014648f};
  for (float scale : {1e-7f, 1e-5f, 1e-3f, 1.0f, 100.0f, 3e4f}) {
    const std::vector<float> r = random_values(2000, 11, scale);
    values.insert(values.end(), r.begin(), r.end());
  }
  for (float x : values) {
    EXPECT_EQ(math::f16_bits(math::float_bits(x)), compiler_f16_bits(x)) << x;
  }
  // Every half converts to fp32 exactly and back to itself; NaN to CUDA's quiet NaN.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float x = math::f16_float(static_cast<uint16_t>(h));
    if (std::isnan(x)) {
      EXPECT_EQ((h >> 10) & 0x1fu, 0x1fu);
      EXPECT_EQ(math::f16_bits(math::float_bits(x)), 0x7fffu);
      continue;
    }
    ASSERT_EQ(math::f16_bits(math::float_bits(x)), h) << std::hex << h;
    ASSERT_EQ(compiler_f16_bits(x), h) << std::hex << h;
  }
}

TEST(CudaHalfMath, Bf16RoundingMatchesTheCpuBackendAndConvertsBackExactly) {
  std::vector<float> x = random_values(500, 12, 1e3f);
  x.insert(x.end(), {NAN, INFINITY, -0.0f, 1.00390625f, 3.4e38f});
  std::vector<uint16_t> cpu(x.size());
  cpu::to_bf16(x.data(), static_cast<int64_t>(x.size()), cpu.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(math::half_input_bits(x[i], false), cpu[i]) << x[i];
    const float back = math::bf16_float(cpu[i]);
    if (std::isfinite(x[i]) && std::abs(x[i]) < 1e38f) {  // the largest round to inf
      EXPECT_LE(std::abs(back - x[i]), std::abs(x[i]) / 256) << x[i];
    }
  }
}

TEST(CudaHalfMath, F16ClampFollowsHuggingFacesT5) {
  // What would round to an fp16 inf becomes finfo(float16).max - 1000 (64504, stored as fp16:
  // 64512, as torch.clamp's result in an fp16 tensor).
  const uint16_t clamped = math::f16_bits(math::float_bits(65504.0f - 1000.0f));
  EXPECT_EQ(math::f16_float(clamped), 64512.0f);
  for (float x : {65520.0f, 70000.0f, 1e30f, INFINITY}) {
    EXPECT_EQ(math::half_input_bits(x, true), clamped) << x;
    EXPECT_EQ(math::half_input_bits(-x, true), clamped | 0x8000u) << -x;
  }
  // Finite fp16 values are not touched, the largest one included.
  for (float x : {65504.0f, 65519.0f, -65504.0f, 1.5f, 0.0f}) {
    EXPECT_EQ(math::half_input_bits(x, true), compiler_f16_bits(x)) << x;
  }
  EXPECT_TRUE(std::isnan(math::f16_float(math::half_input_bits(NAN, true))));
  // bf16 has fp32's range: no clamp.
  EXPECT_NEAR(math::bf16_float(math::half_input_bits(1e30f, false)), 1e30f, 1e30f / 256);
}

// Half values within one unit in the last place of the CPU's fp32 values rounded (a sum in
// another order, or the CPU's vectorised exp, may round across), or 2e-6 near zero.
void expect_rounded_from(const std::vector<uint16_t>& got, const std::vector<float>& want, bool f16,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const float ulp = f16 ? 1.0f / 1024 : 1.0f / 128;
  for (size_t i = 0; i < got.size(); ++i) {
    const float value = f16 ? math::f16_float(got[i]) : math::bf16_float(got[i]);
    const float expected = f16 ? math::f16_float(math::half_input_bits(want[i], true))
                               : math::bf16_float(math::half_input_bits(want[i], false));
    ASSERT_NEAR(value, expected, std::abs(expected) * ulp + 2e-6f)
        << what << " [" << i << "], fp32 " << want[i];
  }
}

TensorView view(std::vector<float>& v, std::vector<int64_t> shape) {
  return TensorView(v.data(), shape, DataType::kF32, Device::kCpu);
}

TEST(CudaReference, RmsNormToHalfIsTheCpuBackendsNormRounded) {
  const int64_t m = 3, d = 41;
  std::vector<float> x = random_values(m * d, 13, 3.0f), w = random_values(d, 14);
  std::vector<float> cpu(x.size());
  ops::rms_norm(view(x, {m, d}), view(w, {d}), 1e-6f, 1.0f, view(cpu, {m, d}));
  for (bool f16 : {false, true}) {
    std::vector<uint16_t> ref(x.size());
    cuda::reference::rms_norm_half(x.data(), m, d, w.data(), 1e-6f, 1.0f, ref.data(), f16);
    expect_rounded_from(ref, cpu, f16, f16 ? "rms_norm fp16" : "rms_norm bf16");
  }
}

TEST(CudaReference, ActivationToHalfIsTheCpuBackendsActivationRounded) {
  const int64_t n = 300;
  std::vector<float> a = random_values(n, 15, 4.0f), b = random_values(n, 16);
  a[0] = 7e4f;  // past fp16's range: clamped
  for (bool gated : {false, true}) {
    std::vector<float> cpu = a;
    if (gated) {
      ops::gated_gelu(view(cpu, {n}), view(b, {n}));
    } else {
      ops::relu(view(cpu, {n}));
    }
    for (bool f16 : {false, true}) {
      std::vector<uint16_t> ref(static_cast<size_t>(n));
      cuda::reference::activation_half(a.data(), gated ? b.data() : nullptr, n, ref.data(), f16);
      expect_rounded_from(ref, cpu, f16, gated ? "gated_gelu" : "relu");
    }
  }
}

// Rows with ties (the lower id first), -inf, and the maximum anywhere (NaN: the tiny case below).
std::vector<float> top_k_rows(int64_t rows, int64_t vocab) {
  std::vector<float> logits = random_values(static_cast<size_t>(rows * vocab), 24, 3.0f);
  logits[0 * vocab + 5] = 9.0f;
  logits[0 * vocab + 2] = 9.0f;
  logits[0 * vocab + vocab - 1] = 9.0f;
  logits[1 * vocab + 0] = -INFINITY;
  logits[1 * vocab + 3] = -INFINITY;
  logits[2 * vocab + vocab / 2] = 20.0f;
  return logits;
}

// log-softmax in double, the k best by (value desc, id asc). Tolerance: a 32k-term fp32 sum.
void expect_top_k(const std::vector<float>& logits, int64_t rows, int64_t vocab, int k,
                  const std::vector<int>& ids, const std::vector<float>& logprobs) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * vocab;
    std::vector<int> order;
    double max_value = -INFINITY, sum = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      if (std::isnan(row[i])) continue;
      order.push_back(static_cast<int>(i));
      max_value = std::max(max_value, double(row[i]));
    }
    for (int i : order) sum += std::exp(double(row[i]) - max_value);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
    for (int j = 0; j < k; ++j) {
      SCOPED_TRACE("row " + std::to_string(r) + " rank " + std::to_string(j));
      ASSERT_EQ(ids[size_t(r * k + j)], order[size_t(j)]);
      const double want = double(row[order[size_t(j)]]) - max_value - std::log(sum);
      if (std::isinf(want)) {
        EXPECT_EQ(logprobs[size_t(r * k + j)], -INFINITY);
      } else {
        EXPECT_NEAR(logprobs[size_t(r * k + j)], want, 1e-4 * std::max(1.0, std::abs(want)));
      }
    }
  }
}

TEST(CudaReference, TopKLogSoftmaxIsTheCpuBackends) {
  const int64_t rows = 3;
  for (const int64_t vocab : {int64_t{40}, int64_t{20000}}) {
    const std::vector<float> logits = top_k_rows(rows, vocab);
    for (const int k : {1, 8, ops::kMaxTopK}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + " k " + std::to_string(k));
      const size_t n = static_cast<size_t>(rows * k);
      std::vector<int> cpu_ids(n), ref_ids(n);
      std::vector<float> cpu_lp(n), ref_lp(n), copy = logits;
      ops::top_k_log_softmax(view(copy, {rows, vocab}), k, cpu_ids.data(), cpu_lp.data());
      cuda::reference::top_k_log_softmax(logits.data(), rows, vocab, k, ref_ids.data(),
                                         ref_lp.data());
      expect_top_k(logits, rows, vocab, k, cpu_ids, cpu_lp);
      expect_top_k(logits, rows, vocab, k, ref_ids, ref_lp);
    }
  }
  // Fewer tokens than k that are not NaN: the rest are -1 / -inf.
  std::vector<float> tiny = {NAN, 1.0f, NAN};
  int ids[3];
  float lp[3];
  cuda::reference::top_k_log_softmax(tiny.data(), 1, 3, 3, ids, lp);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], -1);
  EXPECT_EQ(lp[2], -INFINITY);
  ops::top_k_log_softmax(view(tiny, {1, 3}), 3, ids, lp);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], -1);
  EXPECT_EQ(lp[2], -INFINITY);
}

class FusedOpsTest : public ::testing::TestWithParam<Device> {};

Tensor on(Device device, const std::vector<float>& values, std::vector<int64_t> shape) {
  std::vector<float> copy = values;
  Tensor t = Tensor::empty(shape, device);
  ops::copy_to(t, view(copy, shape));
  return t;
}

std::vector<uint16_t> half_to_host(const Tensor& t) {
  Tensor host = Tensor::empty(t.shape(), Device::kCpu, t.dtype());
  ops::copy_to(host, t);
  return {host.data_as<uint16_t>(), host.data_as<uint16_t>() + host.numel()};
}

std::vector<float> to_host(const Tensor& t) {
  Tensor host = Tensor::empty(t.shape());
  ops::copy_to(host, t);
  return {host.data(), host.data() + host.numel()};
}

TEST_P(FusedOpsTest, TheActivationWritesTheLinearLayersInputType) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const int64_t rows = 4, d_ff = 48;
  const std::vector<float> a = random_values(rows * d_ff, 17, 3.0f),
                           b = random_values(rows * d_ff, 18);
  for (const ComputeType type : {ComputeType::kBFloat16, ComputeType::kFloat16}) {
    if (dev == Device::kCpu && type == ComputeType::kFloat16) continue;  // not a CPU type
    Tensor w = Tensor::empty({8, d_ff});
    const std::vector<float> wv = random_values(8 * d_ff, 19, 0.1f);
    std::copy(wv.begin(), wv.end(), w.data());
    const LinearWeight lw = ops::prepare_linear(w, {.device = dev, .compute_type = type});
    const DataType in = ops::linear_input_type(lw);
    EXPECT_EQ(in, dev == Device::kCpu ? DataType::kF32 : lw.dtype);
    for (bool gated : {false, true}) {
      SCOPED_TRACE(std::string(gated ? "gated" : "relu") + " " +
                   std::string(compute_type_name(type)));
      const Tensor ad = on(dev, a, {rows, d_ff}), bd = on(dev, b, {rows, d_ff});
      const Tensor y = Tensor::empty({rows, d_ff}, dev, in);
      ops::feed_forward_activation(ad, gated ? bd.view() : TensorView(), y);
      std::vector<float> want = a;  // the f32 op on the CPU, the reference of both
      std::vector<float> bh = b;
      if (gated) {
        ops::gated_gelu(view(want, {rows, d_ff}), view(bh, {rows, d_ff}));
      } else {
        ops::relu(view(want, {rows, d_ff}));
      }
      if (in == DataType::kF32) {
        const std::vector<float> got = to_host(y);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 2e-6f * std::max(1.0f, std::abs(want[i])));
        ops::feed_forward_activation(ad, gated ? bd.view() : TensorView(), ad);  // in place
        EXPECT_EQ(to_host(ad), got);
      } else {
        expect_rounded_from(half_to_host(y), want, in == DataType::kF16, "activation");
        // The GEMM reads the half input as it is: the same as from the f32 values it came from.
        const Tensor from_half = Tensor::empty({rows, 8}, dev),
                     from_f32 = Tensor::empty({rows, 8}, dev);
        ops::linear(y, lw, from_half);
        const std::vector<float> rounded_back = [&] {
          std::vector<float> out;
          for (uint16_t h : half_to_host(y))
            out.push_back(in == DataType::kF16 ? math::f16_float(h) : math::bf16_float(h));
          return out;
        }();
        ops::linear(on(dev, rounded_back, {rows, d_ff}), lw, from_f32);
        EXPECT_EQ(to_host(from_half), to_host(from_f32));
      }
    }
  }
}

TEST_P(FusedOpsTest, RmsNormWritesAHalfYOnlyWhereTheGemmsReadOne) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const int64_t m = 3, d = 64;
  std::vector<float> x = random_values(m * d, 20, 2.0f), w = random_values(d, 21);
  std::vector<float> want(x.size());
  ops::rms_norm(view(x, {m, d}), view(w, {d}), 1e-6f, 0.5f, view(want, {m, d}));
  const Tensor xd = on(dev, x, {m, d}), wd = on(dev, w, {d});
  for (const DataType type : {DataType::kBF16, DataType::kF16}) {
    const Tensor y = Tensor::empty({m, d}, dev, type);
    if (dev == Device::kCpu) {
      EXPECT_THROW(ops::rms_norm(xd, wd, 1e-6f, 0.5f, y), EngineError);
      continue;
    }
    ops::rms_norm(xd, wd, 1e-6f, 0.5f, y);
    expect_rounded_from(half_to_host(y), want, type == DataType::kF16, "rms_norm");
  }
  // A linear layer refuses an input in another half type than its weight's.
  Tensor wt = Tensor::empty({4, d});
  std::fill(wt.data(), wt.data() + wt.numel(), 0.5f);
  const LinearWeight lw =
      ops::prepare_linear(wt, {.device = dev, .compute_type = ComputeType::kBFloat16});
  const Tensor f16_x = Tensor::empty({m, d}, dev, DataType::kF16), out = Tensor::empty({m, 4}, dev);
  EXPECT_THROW(ops::linear(f16_x, lw, out), EngineError);
}

TEST_P(FusedOpsTest, TheProfilerChargesDeviceTimeToTheOpThatLaunchedIt) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const int64_t m = 64, d = 512;
  const Tensor x = on(dev, random_values(m * d, 22), {m, d}),
               w = on(dev, random_values(d, 23), {d});
  const Tensor y = Tensor::empty({m, d}, dev);
  profiler::reset();
  profiler::set_enabled(true);
  ops::rms_norm(x, w, 1e-6f, 1.0f, y);
  if (dev == Device::kCpu) {  // no device timing there: a backend's report, by hand
    const profiler::ScopedOp op(profiler::Op::kAttention);
    EXPECT_EQ(profiler::current_op(), profiler::Op::kAttention);
    profiler::add_device_time(profiler::current_op(), "attention", 1500);
  }
  profiler::set_enabled(false);
  EXPECT_EQ(profiler::current_op(), profiler::Op::kCount);
  const auto stats = profiler::snapshot();
  const auto kernels = profiler::kernel_snapshot();
  EXPECT_EQ(stats[size_t(profiler::Op::kRmsNorm)].calls, 1u);
  ASSERT_EQ(kernels.size(), 1u);
  if (dev == Device::kCpu) {
    EXPECT_EQ(stats[size_t(profiler::Op::kRmsNorm)].device_nanoseconds, 0u);
    EXPECT_EQ(stats[size_t(profiler::Op::kAttention)].device_nanoseconds, 1500u);
    EXPECT_EQ(kernels[0].name, "attention");
  } else {
    EXPECT_GT(stats[size_t(profiler::Op::kRmsNorm)].device_nanoseconds, 0u);
    EXPECT_EQ(kernels[0].name, "rms_norm");
    EXPECT_EQ(kernels[0].launches, 1u);
  }
  profiler::reset();
  EXPECT_TRUE(profiler::kernel_snapshot().empty());
}

TEST_P(FusedOpsTest, TopKLogSoftmaxSendsBackOnlyIdsAndLogProbs) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const int64_t rows = 5, vocab = 32128;  // t5-small's vocabulary
  const std::vector<float> logits = top_k_rows(rows, vocab);
  const Tensor on_device = on(dev, logits, {rows, vocab});
  for (const int k : {1, 4, ops::kMaxTopK}) {
    std::vector<int> ids(static_cast<size_t>(rows * k));
    std::vector<float> logprobs(ids.size());
    ops::top_k_log_softmax(on_device, k, ids.data(), logprobs.data());
    expect_top_k(logits, rows, vocab, k, ids, logprobs);
  }
  std::vector<int> ids(static_cast<size_t>(rows * (ops::kMaxTopK + 1)));
  std::vector<float> logprobs(ids.size());
  EXPECT_THROW(ops::top_k_log_softmax(on_device, 0, ids.data(), logprobs.data()), EngineError);
  EXPECT_THROW(ops::top_k_log_softmax(on_device, ops::kMaxTopK + 1, ids.data(), logprobs.data()),
               EngineError);
  const std::vector<float> after = to_host(on_device);
  EXPECT_EQ(std::memcmp(after.data(), logits.data(), logits.size() * sizeof(float)), 0)
      << "the logits changed";
}

// A self-attention's q, k and v as one GEMM over their concatenated weights (what the loader makes
// of them: AttentionWeights::qkv) give the three GEMMs' outputs, in every weight type the device
// takes (int8 too: its scales are per weight row, so concatenating rows quantises alike), and
// attention reads the fused output's thirds in place (fused_qkv_sequence's row stride) exactly
// as it reads them copied out into q, k and v of their own.
TEST_P(FusedOpsTest, OneQkvGemmIsTheThreeGemmsAndAttentionReadsItsThirdsInPlace) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const int64_t heads = 4, hd = 16, inner = heads * hd, d_model = 48;
  const std::vector<int64_t> lengths = {5, 9, 300};  // 300: past oneDNN's 256-row chunk
  const int64_t rows = 314;
  const std::vector<float> x = random_values(rows * d_model, 30);
  std::vector<std::vector<float>> parts;
  std::vector<float> all;
  for (unsigned p = 0; p < 3; ++p) {
    parts.push_back(random_values(inner * d_model, 31 + p, 0.2f));
    all.insert(all.end(), parts.back().begin(), parts.back().end());
  }
  const Tensor xd = on(dev, x, {rows, d_model});
  for (const ComputeType type :
       {ComputeType::kFloat32, ComputeType::kBFloat16, ComputeType::kFloat16, ComputeType::kInt8}) {
    if (dev == Device::kCpu && type == ComputeType::kFloat16) continue;  // not a CPU type
    if (dev == Device::kCuda && type == ComputeType::kInt8) continue;    // the CPU's only
    SCOPED_TRACE(std::string(compute_type_name(type)));
    const ModelOptions options{.device = dev, .compute_type = type};
    const Tensor fused = Tensor::empty({rows, 3 * inner}, dev);
    ops::linear(xd, ops::prepare_linear(on(Device::kCpu, all, {3 * inner, d_model}), options),
                fused);
    const std::vector<float> got = to_host(fused);
    std::vector<std::vector<float>> separate;  // q, k, v, each [rows, inner]
    for (const std::vector<float>& w : parts) {
      const Tensor y = Tensor::empty({rows, inner}, dev);
      ops::linear(xd, ops::prepare_linear(on(Device::kCpu, w, {inner, d_model}), options), y);
      separate.push_back(to_host(y));
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t p = 0; p < 3; ++p) {
        for (int64_t j = 0; j < inner; ++j) {
          double abs_sum = 0;  // the bound: fp32 sums in another order, the same rounded inputs
          for (int64_t i = 0; i < d_model; ++i)
            abs_sum +=
                std::abs(x[size_t(r * d_model + i)] * parts[size_t(p)][size_t(j * d_model + i)]);
          ASSERT_NEAR(got[size_t(r * 3 * inner + p * inner + j)],
                      separate[size_t(p)][size_t(r * inner + j)], 1e-6 * abs_sum + 1e-7)
              << "row " << r << " part " << p << " column " << j;
        }
      }
    }

    // The attention over the fused rows in place, and over copies of their thirds.
    std::vector<float> q, k, v;
    for (int64_t r = 0; r < rows; ++r) {
      for (auto* third : {&q, &k, &v}) {
        const auto first = got.begin() + r * 3 * inner +
                           (third == &q   ? 0
                            : third == &k ? 1
                                          : 2) *
                               inner;
        third->insert(third->end(), first, first + inner);
      }
    }
    const Tensor qd = on(dev, q, {rows, inner}), kd = on(dev, k, {rows, inner}),
                 vd = on(dev, v, {rows, inner});
    const Tensor in_place = Tensor::empty({rows, inner}, dev),
                 copied = Tensor::empty({rows, inner}, dev);
    const PositionBias host_bias = test::random_bias(heads, 8, 34);
    const std::vector<float> table(host_bias.table.data(),
                                   host_bias.table.data() + host_bias.table.numel());
    const PositionBias bias{on(dev, table, host_bias.table.shape()), host_bias.max_distance};
    std::vector<ops::AttentionSequence> fused_seqs, copied_seqs;
    int64_t first = 0;
    for (const int64_t len : lengths) {
      fused_seqs.push_back(
          ops::fused_qkv_sequence(fused.rows(first, len), in_place.rows(first, len)));
      copied_seqs.push_back({qd.rows(first, len), 0, kd.rows(first, len), vd.rows(first, len),
                             copied.rows(first, len)});
      first += len;
    }
    const Tensor workspace = ops::attention_workspace(dev, 300);
    ops::attention({fused_seqs.data(), 3, heads, hd, &bias, false, workspace});
    ops::attention({copied_seqs.data(), 3, heads, hd, &bias, false, workspace});
    EXPECT_EQ(to_host(in_place), to_host(copied));
  }
}

// What fused_qkv_sequence's row stride is not for: a width that is not three of out's, an
// append (new_k / new_v), a decoder step's attention.
TEST_P(FusedOpsTest, AFusedQkvSequenceIsRefusedWhereItsStrideCannotBeRead) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const int64_t heads = 4, hd = 16, inner = heads * hd;
  const Tensor fused = Tensor::empty({4, 3 * inner}, dev), out = Tensor::empty({4, inner}, dev);
  EXPECT_THROW(ops::fused_qkv_sequence(fused.rows(0, 4), Tensor::empty({4, 2 * inner}, dev)),
               EngineError);
  const Tensor workspace = ops::attention_workspace(dev, 4);
  ops::AttentionSequence seq = ops::fused_qkv_sequence(fused.rows(0, 1), out.rows(0, 1));
  EXPECT_THROW(ops::decode_attention({&seq, 1, heads, hd, nullptr, false, workspace}), EngineError);
  seq.new_k = seq.new_v = out.rows(1, 1);
  EXPECT_THROW(ops::attention({&seq, 1, heads, hd, nullptr, false, workspace}), EngineError);
}

INSTANTIATE_TEST_SUITE_P(Devices, FusedOpsTest, ::testing::Values(Device::kCpu, Device::kCuda),
                         [](const auto& info) {
                           return std::string(info.param == Device::kCpu ? "Cpu" : "Cuda");
                         });

}  // namespace
}  // namespace seqpipe::engine
