// The ops on every device this build has, against fp32 references computed on the host: inputs
// are made on the host, copied to the device with copy_to, and the results copied back. The
// linear op runs in every compute type, within the bound stated for it. Also T5's relative
// position buckets against values worked out from HF's _relative_position_bucket.
#include "ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/kernels.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/model.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

using test::random_values;

// The devices the op tests run on: every backend's. A device this build or machine lacks skips
// its instances with the reason (CI has the CUDA build and no GPU).
const Device kTestDevices[] = {Device::kCpu, Device::kCuda};

std::string device_label(Device d) {
  return d == Device::kCpu ? "Cpu" : "Cuda";
}

// A host tensor with the given values.
Tensor host(const std::vector<int64_t>& shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(shape);
  EXPECT_EQ(t.numel(), static_cast<int64_t>(values.size()));
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

Tensor to_device(const Tensor& t, Device device) {
  Tensor out = Tensor::empty(t.shape(), device, t.dtype());
  ops::copy_to(out, t);
  return out;
}

std::vector<float> to_host(const TensorView& t) {
  Tensor out = Tensor::empty(t.shape());
  ops::copy_to(out, t);
  return {out.data(), out.data() + out.numel()};
}

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

class OpsTest : public ::testing::TestWithParam<Device> {};

TEST_P(OpsTest, CopyToRoundTripsAndCopiesRowViews) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const std::vector<float> values = random_values(24, 1);
  const Tensor d = to_device(host({6, 4}, values), dev);
  EXPECT_EQ(d.device(), dev);
  EXPECT_EQ(to_host(d), values);
  // Rows 1..2 of one tensor into rows 3..4 of another: only those rows change.
  Tensor other = to_device(host({6, 4}, std::vector<float>(24, 0.0f)), dev);
  ops::copy_to(other.rows(3, 2), d.rows(1, 2));
  const std::vector<float> got = to_host(other);
  for (int64_t i = 0; i < 24; ++i) {
    const bool copied = i >= 12 && i < 20;
    EXPECT_EQ(got[size_t(i)], copied ? values[size_t(i - 8)] : 0.0f) << i;
  }
  EXPECT_THROW(ops::copy_to(other.rows(0, 1), d.rows(0, 2)), EngineError) << "sizes differ";
  EXPECT_THROW(d.rows(5, 2), EngineError) << "rows past the end";
}

// Rows of 3 floats (12 bytes: copied bytewise on a GPU) and of 4 (16: a vector at a time), many
// pairs in one call; a pair across devices or of two sizes is refused before anything is copied.
TEST_P(OpsTest, CopyAllCopiesEveryPairAndRefusesMismatches) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  for (const int64_t width : {int64_t{3}, int64_t{4}}) {
    const std::vector<float> values = random_values(size_t(8 * width), 2);
    const Tensor src = to_device(host({8, width}, values), dev);
    Tensor dst = to_device(host({8, width}, std::vector<float>(size_t(8 * width), 0.0f)), dev);
    // Row r of src into row 7 - r of dst, for rows 0..5, each its own pair; rows 6, 7 of src stay.
    std::vector<TensorCopy> pairs;
    for (int64_t r = 0; r < 6; ++r) pairs.push_back({dst.rows(7 - r, 1), src.rows(r, 1)});
    ops::copy_all(pairs);
    const std::vector<float> got = to_host(dst);
    for (int64_t r = 0; r < 8; ++r) {
      for (int64_t c = 0; c < width; ++c) {
        const float want = r >= 2 ? values[size_t((7 - r) * width + c)] : 0.0f;
        EXPECT_EQ(got[size_t(r * width + c)], want) << "width " << width << " row " << r;
      }
    }
    const std::vector<TensorCopy> sizes = {{dst.rows(0, 1), src.rows(0, 2)}};
    EXPECT_THROW(ops::copy_all(sizes), EngineError);
  }
  if (dev != Device::kCpu) {
    const Tensor on_host = host({2, 4}, random_values(8, 3));
    const Tensor on_device = to_device(on_host, dev);
    const std::vector<TensorCopy> across = {{on_device.rows(0, 1), on_host.rows(1, 1)}};
    EXPECT_THROW(ops::copy_all(across), EngineError);
  }
}

TEST_P(OpsTest, RmsNormMatchesFormula) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const std::vector<float> w = {0.5f, 0.75f, 1.0f, 1.25f, 1.5f};
  std::vector<float> x(10);
  for (int i = 0; i < 10; ++i) x[size_t(i)] = std::sin(float(i)) * 3;
  const Tensor xd = to_device(host({2, 5}, x), dev), wd = to_device(host({5}, w), dev);
  const Tensor yd = Tensor::empty({2, 5}, dev);
  ops::rms_norm(xd, wd, 1e-6f, 2.0f, yd);
  const std::vector<float> y = to_host(yd);
  for (int r = 0; r < 2; ++r) {
    double ms = 0;
    for (int i = 0; i < 5; ++i) ms += double(x[size_t(r * 5 + i)]) * x[size_t(r * 5 + i)] / 5;
    for (int i = 0; i < 5; ++i) {
      EXPECT_NEAR(y[size_t(r * 5 + i)],
                  w[size_t(i)] * x[size_t(r * 5 + i)] / std::sqrt(ms + 1e-6) * 2.0, 1e-5);
    }
  }
}

TEST_P(OpsTest, EmbeddingGathersRowsAndRefusesIdsOutsideTheVocabulary) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const std::vector<float> table = random_values(5 * 3, 2);
  const Tensor td = to_device(host({5, 3}, table), dev);
  const Tensor out = Tensor::empty({3, 3}, dev);
  const int ids[3] = {4, 0, 4};
  Tensor staging;
  ops::embedding(ops::stage_ids(ids, 3, 5, dev, staging), td, out);
  const std::vector<float> got = to_host(out);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(got[size_t(i * 3 + j)], table[size_t(ids[i] * 3 + j)]);
  }
  const int bad[1] = {5};
  EXPECT_THROW(ops::stage_ids(bad, 1, 5, dev, staging), EngineError);
  const int negative[1] = {-1};
  EXPECT_THROW(ops::stage_ids(negative, 1, 5, dev, staging), EngineError);
}

TEST_P(OpsTest, ReluAndGatedGeluMatchTheirFormulas) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  // 16 lanes at a time plus a tail; inputs from deep negative (gelu -> -0) to large positive.
  std::vector<float> a, b;
  for (float x = -60.0f; x <= 60.0f; x += 0.0371f) a.push_back(x);
  for (size_t i = 0; i < a.size(); ++i) b.push_back(1.0f + 0.001f * float(i % 7));
  const int64_t n = static_cast<int64_t>(a.size());
  const Tensor ad = to_device(host({n}, a), dev), bd = to_device(host({n}, b), dev);
  ops::gated_gelu(ad, bd);
  const std::vector<float> gelu = to_host(ad);
  const Tensor rd = to_device(host({n}, a), dev);
  ops::relu(rd);
  const std::vector<float> relu = to_host(rd);
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i];
    const double g = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    // A few float ulps of the result, or 1e-7 near zero.
    EXPECT_NEAR(gelu[i], g * b[i], 1e-6 * std::max(1.0, std::abs(g * b[i]))) << "x " << x;
    EXPECT_EQ(relu[i], x > 0 ? a[i] : 0.0f);
  }
}

TEST_P(OpsTest, AttentionMatchesNaiveSoftmaxWithBiasAndCausalMask) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const int64_t heads = 2, hd = 4, inner = heads * hd, len = 5;
  const std::vector<float> q = random_values(len * inner, 7), k = random_values(len * inner, 8),
                           v = random_values(len * inner, 9);
  std::vector<float> table(heads * 7);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.1f * float(i);
  const PositionBias bias{to_device(host({heads, 7}, table), dev), 3};
  const Tensor qd = to_device(host({len, inner}, q), dev),
               kd = to_device(host({len, inner}, k), dev),
               vd = to_device(host({len, inner}, v), dev), out = Tensor::empty({len, inner}, dev);
  const Tensor workspace = ops::attention_workspace(dev, len);
  for (bool causal : {false, true}) {
    const ops::AttentionSequence seq{qd, 0, kd, vd, out};
    ops::attention({&seq, 1, heads, hd, &bias, causal, workspace});
    const std::vector<float> got = to_host(out);
    for (int64_t i = 0; i < len; ++i) {
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<double> s;
        const int64_t kend = causal ? i + 1 : len;
        double mx = -1e30, total = 0;
        for (int64_t j = 0; j < kend; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d)
            dot += double(q[size_t(i * inner + h * hd + d)]) * k[size_t(j * inner + h * hd + d)];
          const int64_t rel = std::clamp<int64_t>(j - i, -3, 3);
          dot += table[size_t(h * 7 + rel + 3)];
          s.push_back(dot);
          mx = std::max(mx, dot);
        }
        for (auto& x : s) total += (x = std::exp(x - mx));
        for (int64_t d = 0; d < hd; ++d) {
          double want = 0;
          for (int64_t j = 0; j < kend; ++j)
            want += s[size_t(j)] / total * v[size_t(j * inner + h * hd + d)];
          EXPECT_NEAR(got[size_t(i * inner + h * hd + d)], want, 1e-5)
              << "causal " << causal << " row " << i;
        }
      }
    }
  }
  // More keys than the workspace was made for: refused, not written past its end.
  const Tensor small = ops::attention_workspace(dev, len - 1);
  const ops::AttentionSequence seq{qd, 0, kd, vd, out};
  EXPECT_THROW(ops::attention({&seq, 1, heads, hd, &bias, false, small}), EngineError);
}

// A decoder step's self-attention: the new key and value rows are written to the cache's row
// q_pos first, then attended to, as if they had been there before the call.
TEST_P(OpsTest, AttentionAppendsTheNewKeyAndValueBeforeReadingThem) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const int64_t heads = 2, hd = 4, inner = heads * hd, keys = 3;
  const std::vector<float> q = random_values(inner, 11), k = random_values(keys * inner, 12),
                           v = random_values(keys * inner, 13);
  std::vector<float> stale_k = k, stale_v = v;
  for (int64_t i = (keys - 1) * inner; i < keys * inner; ++i) {
    stale_k[size_t(i)] = 99.0f;
    stale_v[size_t(i)] = -99.0f;
  }
  const std::vector<float> new_k(k.end() - inner, k.end()), new_v(v.end() - inner, v.end());
  const Tensor qd = to_device(host({1, inner}, q), dev),
               full_k = to_device(host({keys, inner}, k), dev),
               full_v = to_device(host({keys, inner}, v), dev),
               cache_k = to_device(host({keys, inner}, stale_k), dev),
               cache_v = to_device(host({keys, inner}, stale_v), dev),
               new_kd = to_device(host({1, inner}, new_k), dev),
               new_vd = to_device(host({1, inner}, new_v), dev),
               want = Tensor::empty({1, inner}, dev), got = Tensor::empty({1, inner}, dev);
  const Tensor workspace = ops::attention_workspace(dev, keys);
  const ops::AttentionSequence before{qd, keys - 1, full_k, full_v, want};
  ops::attention({&before, 1, heads, hd, nullptr, true, workspace});
  const ops::AttentionSequence appended{qd, keys - 1, cache_k, cache_v, got, new_kd, new_vd};
  ops::attention({&appended, 1, heads, hd, nullptr, true, workspace});
  EXPECT_EQ(to_host(got), to_host(want));
  EXPECT_EQ(to_host(cache_k), k);
  EXPECT_EQ(to_host(cache_v), v);
  // A new row past the keys' end is refused.
  const ops::AttentionSequence past{qd, keys, cache_k, cache_v, got, new_kd, new_vd};
  EXPECT_THROW(ops::attention({&past, 1, heads, hd, nullptr, false, workspace}), EngineError);
}

// softmax(q k^T + bias) v for one query row at `position` over `keys` rows, in double.
std::vector<double> naive_row(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, int64_t keys, int64_t heads, int64_t hd,
                              const std::vector<float>* table, int64_t max_distance,
                              int64_t position) {
  const int64_t inner = heads * hd;
  std::vector<double> out(static_cast<size_t>(inner));
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> s;
    double mx = -1e30, total = 0;
    for (int64_t j = 0; j < keys; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < hd; ++d)
        dot += double(q[size_t(h * hd + d)]) * k[size_t(j * inner + h * hd + d)];
      if (table != nullptr) {
        const int64_t rel = std::clamp<int64_t>(j - position, -max_distance, max_distance);
        dot += (*table)[size_t(h * (2 * max_distance + 1) + rel + max_distance)];
      }
      s.push_back(dot);
      mx = std::max(mx, dot);
    }
    for (auto& x : s) total += (x = std::exp(x - mx));
    for (int64_t d = 0; d < hd; ++d) {
      for (int64_t j = 0; j < keys; ++j)
        out[size_t(h * hd + d)] += s[size_t(j)] / total * v[size_t(j * inner + h * hd + d)];
    }
  }
  return out;
}

// A decoder step's self-attention for three slots at different positions in one call: each
// slot's new key and value land in its cache row q_pos, and its one query attends to rows
// [0, q_pos] with the position bias (a position past max_distance too). Then the step's
// cross-attention: no bias, no append, every encoder row.
TEST_P(OpsTest, DecodeAttentionAppendsScoresAndSumsEverySlotInOneCall) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const int64_t heads = 3, hd = 20, inner = heads * hd, max_distance = 4;
  const int64_t positions[] = {0, 5, 17};
  std::vector<float> table(size_t(heads * (2 * max_distance + 1)));
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.05f * float(i) - 0.4f;
  const PositionBias bias{to_device(host({heads, 2 * max_distance + 1}, table), dev), max_distance};
  const Tensor workspace = ops::attention_workspace(dev, 18);
  std::vector<Tensor> keep;
  std::vector<ops::AttentionSequence> seqs;
  std::vector<std::vector<float>> qs, ks, vs;
  for (int s = 0; s < 3; ++s) {
    const int64_t keys = positions[s] + 1;
    qs.push_back(random_values(size_t(inner), 100 + unsigned(s)));
    ks.push_back(random_values(size_t(keys * inner), 200 + unsigned(s)));
    vs.push_back(random_values(size_t(keys * inner), 300 + unsigned(s)));
    std::vector<float> stale_k = ks.back(), stale_v = vs.back();
    std::fill(stale_k.end() - inner, stale_k.end(), 99.0f);
    std::fill(stale_v.end() - inner, stale_v.end(), -99.0f);
    keep.push_back(to_device(host({1, inner}, qs.back()), dev));
    keep.push_back(to_device(host({keys, inner}, stale_k), dev));
    keep.push_back(to_device(host({keys, inner}, stale_v), dev));
    keep.push_back(Tensor::empty({1, inner}, dev));
    keep.push_back(to_device(host({1, inner}, {ks.back().end() - inner, ks.back().end()}), dev));
    keep.push_back(to_device(host({1, inner}, {vs.back().end() - inner, vs.back().end()}), dev));
    const Tensor* t = &keep[keep.size() - 6];
    seqs.push_back({t[0], positions[s], t[1], t[2], t[3], t[4], t[5]});
  }
  ops::decode_attention({seqs.data(), 3, heads, hd, &bias, true, workspace});
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(to_host(seqs[s].k), ks[s]) << "slot " << s << "'s cache keys";
    EXPECT_EQ(to_host(seqs[s].v), vs[s]) << "slot " << s << "'s cache values";
    const std::vector<double> want = naive_row(qs[s], ks[s], vs[s], positions[s] + 1, heads, hd,
                                               &table, max_distance, positions[s]);
    const std::vector<float> got = to_host(seqs[s].out);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "slot " << s;
  }
  // Cross-attention: the same caches as encoder rows, nothing appended, no bias.
  for (auto& seq : seqs) seq.new_k = seq.new_v = TensorView();
  ops::decode_attention({seqs.data(), 3, heads, hd, nullptr, false, workspace});
  for (size_t s = 0; s < 3; ++s) {
    const std::vector<double> want =
        naive_row(qs[s], ks[s], vs[s], positions[s] + 1, heads, hd, nullptr, 0, 0);
    const std::vector<float> got = to_host(seqs[s].out);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "slot " << s;
  }
  // A query of two rows is not a decoder step's.
  const Tensor two = Tensor::empty({2, inner}, dev);
  const ops::AttentionSequence rows2{two, 0, seqs[2].k, seqs[2].v, two};
  EXPECT_THROW(ops::decode_attention({&rows2, 1, heads, hd, nullptr, false, workspace}),
               EngineError);
}

TEST_P(OpsTest, OperandsOfAnotherTypeOrShapeAreRefusedWhereTheOpDispatches) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const Tensor w = to_device(host({4}, {1, 1, 1, 1}), dev);
  const Tensor x = Tensor::empty({2, 4}, dev), y = Tensor::empty({2, 4}, dev);
  const Tensor x_bf16 = Tensor::empty({2, 4}, dev, DataType::kBF16);
  EXPECT_THROW(ops::rms_norm(x_bf16, w, 1e-6f, 1.0f, y), EngineError);
  EXPECT_THROW(ops::rms_norm(x, w, 1e-6f, 1.0f, y.rows(0, 1)), EngineError);
  EXPECT_THROW(ops::relu(Tensor()), EngineError);
  const LinearWeight lw =
      ops::prepare_linear(host({4, 4}, std::vector<float>(16, 1.0f)),
                          {.device = dev, .compute_type = ComputeType::kFloat32});
  EXPECT_THROW(ops::linear(x, lw, Tensor::empty({2, 3}, dev)), EngineError);
  EXPECT_THROW(ops::linear(x_bf16, lw, y), EngineError);
}

INSTANTIATE_TEST_SUITE_P(Devices, OpsTest, ::testing::ValuesIn(kTestDevices),
                         [](const auto& info) { return device_label(info.param); });

// y = x W^T for random x, W against a double-precision reference, in every compute type and for
// every CPU kernel choice (CpuKernels::kPortable forces what a CPU without AVX512_BF16 / VNNI
// runs; another device ignores it).
class LinearTest : public ::testing::TestWithParam<std::tuple<Device, ComputeType, CpuKernels>> {};

TEST_P(LinearTest, StaysWithinTheStatedBoundOfFp32) {
  const auto [dev, type, kernels] = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  if (dev == Device::kCuda && type == ComputeType::kInt8)
    GTEST_SKIP() << "int8 runs on the CPU only";
  // m: a decoder step (1), small batches, and more rows than oneDNN's 256-row chunk.
  for (int64_t m : {1, 3, 17, 300}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{64, 96}, {257, 512}}) {
      const std::vector<float> wv = random_values(size_t(n * k), 11, 0.05f);
      const std::vector<float> x = random_values(size_t(m * k), 12);
      const Tensor w = host({n, k}, wv);
      const LinearWeight lw =
          ops::prepare_linear(w, {.device = dev, .compute_type = type, .cpu_kernels = kernels});
      const Tensor xd = to_device(host({m, k}, x), dev);
      for (float beta : {0.0f, 1.0f}) {
        const Tensor yd = to_device(host({m, n}, std::vector<float>(size_t(m * n), 0.5f)), dev);
        ops::linear(xd, lw, yd, beta);
        const std::vector<float> y = to_host(yd);
        double err2 = 0, ref2 = 0;
        for (int64_t r = 0; r < m; ++r) {
          const float* xr = x.data() + r * k;
          float x_max = 0;
          for (int64_t i = 0; i < k; ++i) x_max = std::max(x_max, std::abs(xr[i]));
          for (int64_t j = 0; j < n; ++j) {
            const float* wr = wv.data() + j * k;
            float w_max = 0;
            for (int64_t i = 0; i < k; ++i) w_max = std::max(w_max, std::abs(wr[i]));
            double ref = beta * 0.5, abs_sum = 0, bound = 0;
            for (int64_t i = 0; i < k; ++i) {
              ref += double(xr[i]) * wr[i];
              abs_sum += std::abs(double(xr[i]) * wr[i]);
              // int8: each factor is off by at most half its quantization step.
              const double sx = x_max / 127.0, sw = w_max / 127.0;
              bound += std::abs(xr[i]) * sw / 2 + std::abs(wr[i]) * sx / 2 + sx * sw / 4;
            }
            // bf16: each factor rounded to 8 significant bits, 2^-9 relative at most (x stays
            // fp32 in the portable kernel, so that bound holds for both). fp32: summation only.
            if (type == ComputeType::kBFloat16) bound = std::ldexp(1.0, -8) * abs_sum;
            if (type == ComputeType::kFloat32) bound = 0;
            bound = bound * 1.01 + 1e-5 * abs_sum + 1e-6;  // + fp32 summation
            const double got = y[static_cast<size_t>(r * n + j)];
            ASSERT_LE(std::abs(got - ref), bound)
                << "m " << m << " n " << n << " k " << k << " beta " << beta << " row " << r
                << " col " << j;
            err2 += (got - ref) * (got - ref);
            ref2 += (ref - beta * 0.5) * (ref - beta * 0.5);
          }
        }
        // Typical error, relative to the product's size: bf16 ~0.3%, int8 ~1% on these data.
        const double rms = std::sqrt(err2 / ref2);
        const double max_rms = type == ComputeType::kFloat32    ? 1e-5
                               : type == ComputeType::kBFloat16 ? 0.01
                                                                : 0.03;
        EXPECT_LT(rms, max_rms) << "m " << m << " n " << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    DevicesAndTypes, LinearTest,
    ::testing::Combine(::testing::ValuesIn(kTestDevices),
                       ::testing::Values(ComputeType::kFloat32, ComputeType::kBFloat16,
                                         ComputeType::kInt8),
                       ::testing::Values(CpuKernels::kBest, CpuKernels::kPortable)),
    [](const auto& info) {
      const ComputeType type = std::get<1>(info.param);
      return device_label(std::get<0>(info.param)) +
             (type == ComputeType::kFloat32    ? "Float32"
              : type == ComputeType::kBFloat16 ? "BFloat16"
                                               : "Int8") +
             (std::get<2>(info.param) == CpuKernels::kBest ? "Best" : "Portable");
    });

// Greedy search's argmax: torch.argmax's first maximum, wherever it lies (in a 16-lane block, in
// another lane's block, in the tail past the blocks), and -inf rows (every token masked).
TEST(Ops, ArgmaxIsTheFirstMaximum) {
  for (const int64_t n : {1, 7, 16, 17, 33, 32128}) {
    std::vector<float> row(static_cast<size_t>(n));
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_real_distribution<float> dist(-10.0f, -1.0f);
    for (float& v : row) v = dist(rng);
    for (const int64_t first : {int64_t{0}, n / 2, n - 1}) {
      std::vector<float> r = row;
      r[static_cast<size_t>(first)] = 5.0f;
      for (int64_t later = first + 1; later < n; later += 5) r[static_cast<size_t>(later)] = 5.0f;
      EXPECT_EQ(cpu::argmax(r.data(), n), first) << "n " << n;
      if (first > 0) {  // an equal value in another lane before it wins
        r[static_cast<size_t>(first - 1)] = 5.0f;
        EXPECT_EQ(cpu::argmax(r.data(), n), first - 1) << "n " << n;
      }
    }
    std::vector<float> masked(static_cast<size_t>(n), -INFINITY);
    EXPECT_EQ(cpu::argmax(masked.data(), n), 0) << "n " << n;
    masked.back() = -1e30f;
    EXPECT_EQ(cpu::argmax(masked.data(), n), n - 1) << "n " << n;
  }
}

// Before a model opens the GPU there is no backend for it; loading one then works only where the
// build and the machine have a GPU, and is an error elsewhere.
TEST(Ops, ADeviceWithoutABackendIsAnErrorNotACrash) {
  EXPECT_THROW(allocator_for(Device::kCuda), EngineError);
  EXPECT_THROW(Tensor::empty({2, 2}, Device::kCuda), EngineError);
  const auto load = [] {
    return T5Model::load(SEQPIPE_TEST_DATA_DIR "/t5-tiny-random", {.device = Device::kCuda});
  };
  if (test::missing_device(Device::kCuda)) {
    EXPECT_THROW(load(), EngineError);
  } else {
    EXPECT_EQ(load()->device(), Device::kCuda);
  }
}

}  // namespace
}  // namespace seqpipe::engine
