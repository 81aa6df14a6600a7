// The CUDA kernels' host twins (src/cuda/reference.h: each kernel's arithmetic from
// src/cuda/math.h, in the kernel's order) against the CPU backend, on the host: what CI can
// check of the GPU's numerics without a GPU. Tolerances: fp32 sums in another order, and the
// CPU's vectorised exp (within 2 ulp of expf).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.h"
#include "cuda/attention_math.h"
#include "cuda/math.h"
#include "cuda/reference.h"
#include "ops.h"
#include "seqpipe/engine/device.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/model.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

using test::random_values;

TensorView view(std::vector<float>& v, std::vector<int64_t> shape) {
  return TensorView(v.data(), shape, DataType::kF32, Device::kCpu);
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float rel,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * std::max(1.0f, std::abs(want[i])))
        << what << " [" << i << "]";
  }
}

TEST(CudaReference, RmsNormMatchesTheCpuBackend) {
  const int64_t m = 3, d = 37;
  std::vector<float> x = random_values(m * d, 1), w = random_values(d, 2);
  std::vector<float> want(x.size()), got(x.size());
  for (float scale : {1.0f, 0.125f}) {
    ops::rms_norm(view(x, {m, d}), view(w, {d}), 1e-6f, scale, view(want, {m, d}));
    cuda::reference::rms_norm(x.data(), m, d, w.data(), 1e-6f, scale, got.data());
    expect_close(got, want, 1e-6f, "rms_norm");
  }
}

TEST(CudaReference, ActivationsMatchTheCpuBackend) {
  std::vector<float> a = random_values(45, 3, 4.0f), b = random_values(45, 4);
  a[0] = -30.0f;  // gelu's far tail
  a[1] = 30.0f;
  std::vector<float> cpu_relu = a, ref_relu = a;
  ops::relu(view(cpu_relu, {45}));
  cuda::reference::relu(ref_relu.data(), 45);
  EXPECT_EQ(ref_relu, cpu_relu);
  std::vector<float> cpu_gelu = a, ref_gelu = a;
  ops::gated_gelu(view(cpu_gelu, {45}), view(b, {45}));
  cuda::reference::gated_gelu(ref_gelu.data(), b.data(), 45);
  expect_close(ref_gelu, cpu_gelu, 2e-6f, "gated_gelu");
}

TEST(CudaReference, EmbeddingAndBf16RoundingMatchTheCpuBackend) {
  std::vector<float> table = random_values(6 * 4, 5);
  const int ids[3] = {5, 0, 5};
  std::vector<float> want(12), got(12);
  Tensor staging;
  ops::embedding(ops::stage_ids(ids, 3, 6, Device::kCpu, staging), view(table, {6, 4}),
                 view(want, {3, 4}));
  cuda::reference::embedding(ids, 3, table.data(), 4, got.data());
  EXPECT_EQ(got, want);

  std::vector<float> x = random_values(40, 6, 100.0f);
  x.push_back(NAN);
  x.push_back(INFINITY);
  x.push_back(-0.0f);
  x.push_back(1.00390625f);  // a tie: rounds to even
  std::vector<uint16_t> cpu_bits(x.size()), ref_bits(x.size());
  cpu::to_bf16(x.data(), static_cast<int64_t>(x.size()), cpu_bits.data());
  cuda::reference::to_bf16(x.data(), static_cast<int64_t>(x.size()), ref_bits.data());
  EXPECT_EQ(ref_bits, cpu_bits);
}

// One attention call on the CPU backend and through the reference, from the same inputs: keys
// and values are copied per side, since a decoder step writes its new rows into them.
struct AttentionCase {
  int64_t heads = 2, d = 8;
  std::vector<int64_t> q_rows, q_pos, k_rows;
  bool causal = false, with_bias = true, append = false;
};

// decode: the fused decode-step kernel's twin against ops::decode_attention on the CPU.
void check_attention(const AttentionCase& c, unsigned seed, bool decode = false) {
  const int64_t width = c.heads * c.d, seqs = static_cast<int64_t>(c.q_rows.size());
  const PositionBias bias = test::random_bias(c.heads, 4, seed);

  struct Side {
    std::vector<std::vector<float>> q, k, v, out, new_k, new_v;
    std::vector<ops::AttentionSequence> seqs;
  } cpu_side, ref_side;
  for (Side* side : {&cpu_side, &ref_side}) {
    for (int64_t s = 0; s < seqs; ++s) {
      const unsigned base = seed + 10 * static_cast<unsigned>(s);
      side->q.push_back(random_values(static_cast<size_t>(c.q_rows[s] * width), base + 1));
      side->k.push_back(random_values(static_cast<size_t>(c.k_rows[s] * width), base + 2));
      side->v.push_back(random_values(static_cast<size_t>(c.k_rows[s] * width), base + 3));
      side->out.emplace_back(static_cast<size_t>(c.q_rows[s] * width), 0.0f);
      side->new_k.push_back(random_values(static_cast<size_t>(c.q_rows[s] * width), base + 4));
      side->new_v.push_back(random_values(static_cast<size_t>(c.q_rows[s] * width), base + 5));
    }
    for (int64_t s = 0; s < seqs; ++s) {
      ops::AttentionSequence seq{view(side->q[s], {c.q_rows[s], width}), c.q_pos[s],
                                 view(side->k[s], {c.k_rows[s], width}),
                                 view(side->v[s], {c.k_rows[s], width}),
                                 view(side->out[s], {c.q_rows[s], width})};
      if (c.append) {
        seq.new_k = view(side->new_k[s], {c.q_rows[s], width});
        seq.new_v = view(side->new_v[s], {c.q_rows[s], width});
      }
      side->seqs.push_back(seq);
    }
  }
  int64_t max_keys = 1;
  for (int64_t k : c.k_rows) max_keys = std::max(max_keys, k);
  const Tensor workspace = ops::attention_workspace(Device::kCpu, max_keys);
  ops::AttentionArgs args{cpu_side.seqs.data(),          seqs,     c.heads,  c.d,
                          c.with_bias ? &bias : nullptr, c.causal, workspace};
  if (decode) {
    ops::decode_attention(args);
    args.seqs = ref_side.seqs.data();
    cuda::reference::decode_attention(args);
  } else {
    ops::attention(args);
    args.seqs = ref_side.seqs.data();
    cuda::reference::attention(args);
  }
  for (int64_t s = 0; s < seqs; ++s) {
    expect_close(ref_side.out[s], cpu_side.out[s], 1e-5f,
                 "attention out, sequence " + std::to_string(s));
    expect_close(ref_side.k[s], cpu_side.k[s], 0.0f, "keys after the append");
  }
}

TEST(CudaReference, EncoderAttentionOverPackedSequencesMatchesTheCpuBackend) {
  // Whole sequences of several lengths, bidirectional bias (past max_distance too), no mask.
  check_attention({.q_rows = {3, 11, 1}, .q_pos = {0, 0, 0}, .k_rows = {3, 11, 1}}, 20);
}

// The encoder's attention over one Q/K/V GEMM's rows (ops::fused_qkv_sequence): the kernel's
// twin reads the thirds with their row stride as the CPU backend does.
TEST(CudaReference, EncoderAttentionOverFusedQkvRowsMatchesTheCpuBackend) {
  const int64_t heads = 2, d = 8, width = heads * d;
  const std::vector<int64_t> lengths = {3, 11, 1};
  std::vector<float> qkv = random_values(15 * 3 * width, 50), cpu_out(15 * width),
                     ref_out(15 * width);
  std::vector<ops::AttentionSequence> cpu_seqs, ref_seqs;
  int64_t first = 0;
  for (const int64_t len : lengths) {
    const TensorView rows(qkv.data() + first * 3 * width, {len, 3 * width}, DataType::kF32,
                          Device::kCpu);
    cpu_seqs.push_back(ops::fused_qkv_sequence(rows, view(cpu_out, {15, width}).rows(first, len)));
    ref_seqs.push_back(ops::fused_qkv_sequence(rows, view(ref_out, {15, width}).rows(first, len)));
    first += len;
  }
  const PositionBias bias = test::random_bias(heads, 4, 51);
  const Tensor workspace = ops::attention_workspace(Device::kCpu, 11);
  ops::AttentionArgs args{cpu_seqs.data(), 3, heads, d, &bias, false, workspace};
  ops::attention(args);
  args.seqs = ref_seqs.data();
  cuda::reference::attention(args);
  expect_close(ref_out, cpu_out, 1e-5f, "attention over fused q|k|v rows");
}

TEST(CudaReference, DecodeStepAttentionMatchesTheCpuBackend) {
  // One query per slot at its own position, its key and value appended first; causal, bias.
  check_attention({.q_rows = {1, 1, 1},
                   .q_pos = {0, 6, 9},
                   .k_rows = {1, 7, 10},
                   .causal = true,
                   .append = true},
                  30);
  // Cross-attention: every encoder row, no bias.
  check_attention({.q_rows = {1, 1}, .q_pos = {0, 0}, .k_rows = {5, 13}, .with_bias = false}, 40);
}

TEST(CudaReference, FusedDecodeAttentionMatchesTheCpuBackend) {
  // Head sizes that split the block's values into 16, 2 and 1 parts (d 8, 64, 200 over 128
  // threads); 40 keys: several rounds of 16 keys; positions past the bias's max_distance.
  for (const int64_t d : {int64_t{8}, int64_t{64}, int64_t{200}}) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    check_attention({.heads = 3,
                     .d = d,
                     .q_rows = {1, 1, 1},
                     .q_pos = {0, 6, 39},
                     .k_rows = {1, 7, 40},
                     .causal = true,
                     .append = true},
                    50, true);
    check_attention({.heads = 2,
                     .d = d,
                     .q_rows = {1, 1},
                     .q_pos = {0, 0},
                     .k_rows = {5, 33},
                     .with_bias = false},
                    60, true);
  }
}

TEST(CudaMath, Bf16CacheElementsRoundAsTheCpuAndReadBackExactly) {
  std::vector<float> x = random_values(40, 8, 50.0f);
  x.push_back(1.00390625f);  // a tie: rounds to even
  x.push_back(-0.0f);
  std::vector<uint16_t> cpu_bits(x.size());
  cpu::to_bf16(x.data(), static_cast<int64_t>(x.size()), cpu_bits.data());
  for (size_t i = 0; i < x.size(); ++i) {
    cuda::math::Bf16 stored{};
    cuda::math::cache_store(stored, x[i]);
    EXPECT_EQ(stored.bits, cpu_bits[i]) << x[i];
    const float back = cuda::math::cache_load(stored);
    EXPECT_NEAR(back, x[i], std::abs(x[i]) / 128.0f) << x[i];
    cuda::math::Bf16 again{};
    cuda::math::cache_store(again, back);
    EXPECT_EQ(again.bits, stored.bits) << "a bf16 value is stored as itself";
  }
  EXPECT_EQ(cuda::math::value_parts(128, 64), 2);
  EXPECT_EQ(cuda::math::value_parts(128, 200), 1);
  const float row[3] = {1.0f, 2.0f, 4.0f};
  EXPECT_EQ(cuda::math::biased_score(0.5f, row, 9, 0, 1), 4.5f);  // clamped to +max_distance
  EXPECT_EQ(cuda::math::biased_score(0.5f, nullptr, 9, 0, 1), 0.5f);
}

TEST(CudaReference, ArgmaxTakesTheFirstMaximumAndSkipsTheBannedToken) {
  const int64_t rows = 4;
  // 50: the rows one after another; 20000: the CPU's rows in parallel (a batch's scan).
  for (const int64_t vocab : {int64_t{50}, int64_t{20000}}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    std::vector<float> logits = random_values(rows * vocab, 7);
    logits[1 * vocab + 3] = 9.0f;  // a tie in row 1: the lower index wins
    logits[1 * vocab + 40] = 9.0f;
    logits[2 * vocab + 1] = 12.0f;  // row 2's maximum is banned
    const int banned[rows] = {-1, -1, 1, 0};
    int cpu_ids[rows], ref_ids[rows];
    std::vector<float> before = logits;
    ops::argmax(view(logits, {rows, vocab}), banned, cpu_ids);
    EXPECT_EQ(logits, before) << "argmax changed the logits";
    cuda::reference::argmax(logits.data(), rows, vocab, banned, ref_ids);
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(ref_ids[r], cpu_ids[r]) << "row " << r;
    EXPECT_EQ(cpu_ids[1], 3);
    EXPECT_NE(cpu_ids[2], 1);
    const int out_of_vocab[rows] = {-1, -1, -1, static_cast<int>(vocab)};
    EXPECT_THROW(ops::argmax(view(logits, {rows, vocab}), out_of_vocab, cpu_ids), EngineError);
  }
}

TEST(CudaMath, BiasColumnClampsAndKeysSeenMasks) {
  EXPECT_EQ(cuda::math::bias_column(0, 0, 4), 4);
  EXPECT_EQ(cuda::math::bias_column(9, 0, 4), 8);   // far right: clamped
  EXPECT_EQ(cuda::math::bias_column(0, 20, 4), 0);  // far left: clamped
  EXPECT_EQ(cuda::math::keys_seen(10, 3, true), 4);
  EXPECT_EQ(cuda::math::keys_seen(10, 3, false), 10);
  EXPECT_EQ(cuda::math::keys_seen(4, 9, true), 4);
  EXPECT_FALSE(cuda::math::argmax_prefers(NAN, 0, 1.0f, 5));
  EXPECT_TRUE(cuda::math::argmax_prefers(1.0f, 0, 1.0f, 5));
}

TEST(Device, NamesParseAndBadOnesAreRefused) {
  EXPECT_EQ(parse_device("cpu").device, Device::kCpu);
  EXPECT_EQ(parse_device("cuda").device, Device::kCuda);
  EXPECT_EQ(parse_device("cuda").index, 0);
  EXPECT_EQ(parse_device("cuda:3").index, 3);
  EXPECT_EQ(device_string(parse_device("cuda:3")), "cuda:3");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "CPU", ""}) {
    EXPECT_THROW(parse_device(bad), EngineError) << bad;
  }
}

TEST(Device, AGpuThatIsNotThereIsAClearErrorNamingIt) {
  // cuda:99 exists on no machine this runs on (CI: no GPU, or a build without CUDA).
  try {
    open_device({Device::kCuda, 99});
    FAIL() << "opened cuda:99";
  } catch (const EngineError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:99"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace seqpipe::engine
