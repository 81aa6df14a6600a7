// The bf16 and int8 compute types against fp32 in whole models (oneDNN's kernels and the engine's
// portable ones, which a CPU without AVX512_BF16 / VNNI runs): the fixtures' greedy ids and the
// bundled speller's 200 parity inputs. The linear op's per-call bounds are in ops_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/onednn.h"
#include "cpu/packed_gemm.h"
#include "file_test_util.h"
#include "ops.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/engine/encoder.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/model.h"
#include "seqpipe/engine/safetensors.h"
#include "seqpipe/engine/tokenizer.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

using ::testing::HasSubstr;

TEST(ComputeType, NamesRoundTripAndUnknownNamesAreErrors) {
  for (ComputeType t : {ComputeType::kAuto, ComputeType::kFloat32, ComputeType::kFloat16,
                        ComputeType::kBFloat16, ComputeType::kInt8, ComputeType::kInt8BFloat16}) {
    EXPECT_EQ(parse_compute_type(compute_type_name(t)), t);
  }
  try {
    parse_compute_type("fp8");
    FAIL() << "fp8 parsed";
  } catch (const EngineError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'fp8'"));
    EXPECT_THAT(e.what(), HasSubstr("bfloat16"));
  }
}

TEST(ComputeType, Float16IsRefusedWithTheReason) {
  try {
    T5Model::load(test::data_dir() + "/t5v11-tiny-random",
                  {.threads = 1, .compute_type = ComputeType::kFloat16});
    FAIL() << "float16 loaded a gated-gelu model";
  } catch (const EngineError& e) {
    EXPECT_THAT(e.what(), HasSubstr("gated-gelu"));
    EXPECT_THAT(e.what(), HasSubstr("overflow"));
  }
  EXPECT_THROW(T5Model::load(test::data_dir() + "/t5-tiny-random",
                             {.threads = 1, .compute_type = ComputeType::kFloat16}),
               EngineError);
}

TEST(ComputeType, AutoResolvesToWhatThisCpuRunsFast) {
  auto model = T5Model::load(test::data_dir() + "/t5-tiny-random",
                             {.threads = 1, .compute_type = ComputeType::kAuto});
  const ComputeType want = cpu::onednn_runs(DataType::kI8)     ? ComputeType::kInt8
                           : cpu::onednn_runs(DataType::kBF16) ? ComputeType::kBFloat16
                                                               : ComputeType::kFloat32;
  EXPECT_EQ(model->compute_type(), want);
}

TEST(ComputeType, WeightsAreStoredInTheComputeType) {
  const std::string dir = test::data_dir() + "/t5v11-tiny-random";
  auto f32 = T5Model::load(dir, {.threads = 1});
  for (CpuKernels kernels : {CpuKernels::kBest, CpuKernels::kPortable}) {
    auto bf16 = T5Model::load(
        dir, {.threads = 1, .compute_type = ComputeType::kBFloat16, .cpu_kernels = kernels});
    auto int8 = T5Model::load(
        dir, {.threads = 1, .compute_type = ComputeType::kInt8, .cpu_kernels = kernels});
    const LinearWeight& w = int8->decoder_blocks()[0].ffn.wo;
    EXPECT_EQ(w.dtype, DataType::kI8);
    EXPECT_EQ(w.scales.numel(), w.out);
    EXPECT_EQ(bf16->lm_head().dtype, DataType::kBF16);
    EXPECT_EQ(f32->lm_head().dtype, DataType::kF32);
    // Packed layouts may pad; row-major ones are exactly 2 or 1 (+ scales) bytes per weight.
    if (kernels == CpuKernels::kPortable) {
      EXPECT_EQ(bf16->lm_head().bytes(), f32->lm_head().bytes() / 2);
      EXPECT_EQ(w.bytes(), w.out * w.in + w.out * 4);
    }
  }
}

TEST(LinearComputeType, Int8PortableKernelEqualsOneDnnExactly) {
  // Same quantization, exact int32 sums, the same rescaling: the same floats.
  if (!cpu::onednn_runs(DataType::kI8)) GTEST_SKIP() << "no VNNI: oneDNN's int8 is not used here";
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  const int64_t m = 9, n = 100, k = 320;
  Tensor w = Tensor::empty({n, k}), x = Tensor::empty({m, k});
  Tensor a = Tensor::empty({m, n}), b = Tensor::empty({m, n});
  for (int64_t i = 0; i < w.numel(); ++i) w.data()[i] = dist(rng);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = dist(rng);
  const auto best = ops::prepare_linear(w, {.compute_type = ComputeType::kInt8});
  const auto own = ops::prepare_linear(
      w, {.compute_type = ComputeType::kInt8, .cpu_kernels = CpuKernels::kPortable});
  ASSERT_TRUE(best.packed);
  ASSERT_FALSE(own.packed);
  ops::linear(x, best, a);
  ops::linear(x, own, b);
  EXPECT_EQ(std::vector<float>(a.data(), a.data() + a.numel()),
            std::vector<float>(b.data(), b.data() + b.numel()));
}

// int8 at every row count (but on AMX), and bf16 up to kPackedGemmMaxRows rows, run in the engine's
// loops over oneDNN's packed weights (oneDNN's execute allocates per call); the same weight with
// that path switched off runs in oneDNN's matmul. int8: the same integer sums, so the same floats,
// bit for bit. bf16: the same products, summed in an order that depends on the CPU: on AVX-512
// alone the same up to k = 512 (bit for bit there), but above that, and at any k where oneDNN's
// matmul runs on AMX (a Xeon of the GPU machines), it sums blocks of k apart and adds them, so they
// differ by fp32 rounding: at most 1e-6 of sum |x w|.
TEST(LinearComputeType, PackedGemmEqualsOneDnnsMatmul) {
  for (const DataType dtype : {DataType::kBF16, DataType::kI8}) {
    if (!cpu::onednn_runs(dtype)) continue;
    for (auto [n, k] : {std::pair<int64_t, int64_t>{64, 96}, {257, 512}, {100, 2048}}) {
      std::mt19937 rng(static_cast<unsigned>(n + k));
      std::normal_distribution<float> dist;
      Tensor w = Tensor::empty({n, k});
      for (int64_t i = 0; i < w.numel(); ++i) w.data()[i] = dist(rng) * 0.05f;
      const LinearWeight lw = ops::prepare_linear(
          w,
          {.compute_type = dtype == DataType::kBF16 ? ComputeType::kBFloat16 : ComputeType::kInt8});
      const auto& packed = static_cast<const cpu::OneDnnWeight&>(*lw.packed);
      ASSERT_GT(packed.block_stride, 0) << "oneDNN chose another layout";
      cpu::OneDnnWeight through_onednn = packed;
      through_onednn.block_stride = 0;
      // Every tile's row count (1 to 6 for int8, 1 to 4 for bf16) alone and after full tiles, and
      // an encoder's row count (int8's in the engine's loops too).
      for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{6},
                        int64_t{17}, cpu::kPackedGemmMaxRows, int64_t{288}}) {
        std::vector<float> x(static_cast<size_t>(m * k));
        for (auto& v : x) v = dist(rng);
        std::vector<float> a(static_cast<size_t>(m * n), 0.5f), b = a;
        cpu::linear_packed(x.data(), m, packed, lw.scales.data(), 1.0f, a.data());
        cpu::linear_packed(x.data(), m, through_onednn, lw.scales.data(), 1.0f, b.data());
        if (dtype == DataType::kI8) {
          EXPECT_EQ(a, b) << data_type_name(dtype) << " m " << m << " n " << n << " k " << k;
          continue;
        }
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t j = 0; j < n; ++j) {
            double abs_sum = 0;
            for (int64_t i = 0; i < k; ++i)
              abs_sum += std::abs(double(x[size_t(r * k + i)]) * w.row(j)[i]);
            ASSERT_NEAR(a[size_t(r * n + j)], b[size_t(r * n + j)], 1e-6 * abs_sum)
                << "m " << m << " row " << r << " col " << j;
          }
        }
      }
    }
  }
}

// OpenMP's threads for the calling thread (which oneDNN takes when it picks a layout), for a scope.
class OpenMpThreads {
 public:
  explicit OpenMpThreads(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~OpenMpThreads() { omp_set_num_threads(saved_); }
  OpenMpThreads(const OpenMpThreads&) = delete;
  OpenMpThreads& operator=(const OpenMpThreads&) = delete;

 private:
  int saved_;
};

// Whether oneDNN, left to choose the layout of a [k, n] weight for 16 rows, takes another one than
// packed_gemm.h's 64-column blocks.
bool onednn_picks_other_blocks(DataType dtype, int64_t n, int64_t k) {
  using dnnl::memory;
  using dt = memory::data_type;
  const bool i8 = dtype == DataType::kI8;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  const memory::desc src({16, k}, i8 ? dt::u8 : dt::bf16, memory::format_tag::ab);
  const memory::desc dst({16, n}, i8 ? dt::s32 : dt::f32, memory::format_tag::ab);
  const memory::desc any({k, n}, i8 ? dt::s8 : dt::bf16, memory::format_tag::any);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, any, dst), engine);
  const auto& blocking = pd.weights_desc().data.format_desc.blocking;
  return blocking.inner_nblks != 3 || blocking.inner_blks[1] != 64;
}

// oneDNN 2.6, left to choose, packs a weight in narrower column blocks (which packed_gemm does not
// read, so a decoder step would run in oneDNN's execute, which allocates) on an AMX Xeon for bf16
// or, with few rows, wherever it has more threads than column blocks: here 64 OpenMP threads at
// load. The engine asks for packed_gemm's layout by name: its rows still run there, and they and
// oneDNN's larger row counts over the same layout give the portable kernels' results (int8: the
// same floats; bf16, fed the same bf16 inputs: the same products summed in another order).
TEST(LinearComputeType, PackedGemmRunsWhateverLayoutOneDnnWouldPick) {
  if (!cpu::onednn_runs(DataType::kBF16) && !cpu::onednn_runs(DataType::kI8))
    GTEST_SKIP() << "no AVX512_BF16 or VNNI: oneDNN is not used here";
  int other_blocks = 0;
  for (const DataType dtype : {DataType::kBF16, DataType::kI8}) {
    if (!cpu::onednn_runs(dtype)) continue;
    const ComputeType type = dtype == DataType::kBF16 ? ComputeType::kBFloat16 : ComputeType::kInt8;
    for (auto [n, k] : {std::pair<int64_t, int64_t>{128, 64}, {257, 512}, {512, 96}}) {
      SCOPED_TRACE(std::string(data_type_name(dtype)) + " n " + std::to_string(n) + " k " +
                   std::to_string(k));
      std::mt19937 rng(static_cast<unsigned>(n * k));
      std::normal_distribution<float> dist;
      Tensor w = Tensor::empty({n, k});
      for (int64_t i = 0; i < w.numel(); ++i) w.data()[i] = dist(rng) * 0.05f;
      LinearWeight best;
      {
        const OpenMpThreads many(64);
        other_blocks += onednn_picks_other_blocks(dtype, n, k);
        best = ops::prepare_linear(w, {.compute_type = type});
      }
      const LinearWeight portable =
          ops::prepare_linear(w, {.compute_type = type, .cpu_kernels = CpuKernels::kPortable});
      ASSERT_GT(static_cast<const cpu::OneDnnWeight&>(*best.packed).block_stride, 0)
          << "packed in a layout packed_gemm does not read";
      for (int64_t m : {int64_t{1}, int64_t{5}, cpu::kPackedGemmMaxRows,
                        cpu::kPackedGemmMaxRows + 1, int64_t{200}}) {
        Tensor x = Tensor::empty({m, k}), a = Tensor::empty({m, n}), b = Tensor::empty({m, n});
        for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = dist(rng);
        if (dtype == DataType::kBF16) {
          std::vector<uint16_t> rounded(static_cast<size_t>(x.numel()));
          cpu::to_bf16(x.data(), x.numel(), rounded.data());
          for (int64_t i = 0; i < x.numel(); ++i)
            x.data()[i] = std::bit_cast<float>(uint32_t{rounded[size_t(i)]} << 16);
        }
        ops::linear(x, best, a);
        ops::linear(x, portable, b);
        if (dtype == DataType::kI8) {
          EXPECT_EQ(std::vector<float>(a.data(), a.data() + a.numel()),
                    std::vector<float>(b.data(), b.data() + b.numel()))
              << "m " << m;
          continue;
        }
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t j = 0; j < n; ++j) {
            double abs_sum = 0;
            for (int64_t i = 0; i < k; ++i) abs_sum += std::abs(double(x.row(r)[i]) * w.row(j)[i]);
            ASSERT_NEAR(a.row(r)[j], b.row(r)[j], 1e-6 * abs_sum)
                << "m " << m << " row " << r << " col " << j;
          }
        }
      }
    }
  }
  EXPECT_GT(other_blocks, 0) << "oneDNN took packed_gemm's layout itself: nothing tested";
}

// The fixtures: bf16's greedy ids are fp32's (which are HF's, reference_test.cc).
class FixtureComputeTypeTest
    : public ::testing::TestWithParam<std::tuple<std::string, CpuKernels>> {};

TEST_P(FixtureComputeTypeTest, BFloat16GreedyIdsEqualFloat32s) {
  const auto [fixture, kernels] = GetParam();
  const std::string dir = test::data_dir() + "/" + fixture;
  const auto ref = test::load_json(dir + "/reference.json");
  auto f32 = T5Model::load(dir, {.threads = 1});
  auto bf16 = T5Model::load(
      dir, {.threads = 1, .compute_type = ComputeType::kBFloat16, .cpu_kernels = kernels});
  for (const auto& c : ref["cases"]) {
    const auto input = c["input_ids"].get<std::vector<int>>();
    for (int min_new : {0, 11}) {
      const DecodingOptions o{.max_new_tokens = 11, .min_new_tokens = min_new};
      EXPECT_EQ(generate(bf16, {input}, o)[0].ids, generate(f32, {input}, o)[0].ids);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, FixtureComputeTypeTest,
    ::testing::Combine(::testing::Values("t5-tiny-random", "t5v11-tiny-random"),
                       ::testing::Values(CpuKernels::kBest, CpuKernels::kPortable)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == "t5-tiny-random" ? "T5v10" : "T5v11") +
             (std::get<1>(info.param) == CpuKernels::kBest ? "Best" : "Portable");
    });

// A bf16 checkpoint in the bfloat16 compute type: its linear weights are used as stored, not
// converted through fp32. The fixture's weights, rounded to bf16, are written twice: stored F32
// (loaded through fp32, as before) and stored BF16. Both hold the same numbers, so the models must
// compute the same encoder states bit for bit and the same greedy ids; with the portable kernels
// (row-major weights) every linear weight of the BF16 file is a view of its mapping.
class Bf16CheckpointTest : public ::testing::TestWithParam<std::tuple<std::string, CpuKernels>> {};

// The linear weights used as the file stores them: all but the concatenated projections
// (every self-attention's q|k|v, the decoder's cross k|v of every layer), which are copies.
int64_t linear_weight_bytes(const T5Model& m) {
  int64_t total = m.lm_head().bytes();
  auto add = [&](const LinearWeight& w) { total += w.defined() ? w.bytes() : 0; };
  for (const auto& b : m.encoder_blocks()) {
    for (const auto* w : {&b.attention.o, &b.ffn.wi, &b.ffn.wi_1, &b.ffn.wo}) add(*w);
  }
  for (const auto& b : m.decoder_blocks()) {
    for (const auto* w : {&b.self_attention.o, &b.cross_attention.q, &b.cross_attention.o,
                          &b.ffn.wi, &b.ffn.wi_1, &b.ffn.wo})
      add(*w);
  }
  return total;
}

TEST_P(Bf16CheckpointTest, IsUsedAsStoredAndGivesTheIdsOfTheSameNumbersStoredAsFp32) {
  const auto [fixture, kernels] = GetParam();
  const std::string src = test::data_dir() + "/" + fixture;
  test::TempDir tmp;
  const SafeTensorsFile file(src + "/model.safetensors");
  std::vector<std::vector<float>> values;
  std::vector<TensorToWrite> as_f32, as_bf16;
  for (const auto& [name, info] : file.tensors()) {
    const Tensor t = file.load(name, info.shape);
    values.emplace_back(t.data(), t.data() + t.numel());
    for (float& v : values.back()) v = bf16_to_float(float_to_bf16(v));
  }
  size_t i = 0;
  for (const auto& [name, info] : file.tensors()) {
    as_f32.push_back({name, info.shape, values[i].data(), StorageType::kF32});
    as_bf16.push_back({name, info.shape, values[i].data(), StorageType::kBF16});
    ++i;
  }
  for (const auto& [dir, tensors] : {std::pair{std::string("f32"), as_f32}, {"bf16", as_bf16}}) {
    std::filesystem::create_directory(tmp.path() / dir);
    std::filesystem::copy_file(src + "/config.json", tmp.path() / dir / "config.json");
    write_safetensors(tmp.file(dir + "/model.safetensors"), tensors);
  }
  const ModelOptions options{
      .threads = 1, .compute_type = ComputeType::kBFloat16, .cpu_kernels = kernels};
  auto from_f32 = T5Model::load(tmp.file("f32"), options);
  auto from_bf16 = T5Model::load(tmp.file("bf16"), options);

  if (kernels == CpuKernels::kPortable) {
    // Every linear weight in place (2 bytes each) but the concatenated ones; nothing else of
    // the file is (norms and embeddings are fp32 in every compute type, so they are converted).
    EXPECT_EQ(from_bf16->lm_head().dtype, DataType::kBF16);
    EXPECT_EQ(from_bf16->decoder_cross_kv().dtype, DataType::kBF16);
    EXPECT_EQ(from_bf16->decoder_blocks()[0].self_attention.qkv.dtype, DataType::kBF16);
    EXPECT_EQ(from_bf16->encoder_blocks()[0].attention.qkv.dtype, DataType::kBF16);
    EXPECT_EQ(from_bf16->mapped_weight_bytes(), uint64_t(linear_weight_bytes(*from_bf16)));
    EXPECT_EQ(from_bf16->lm_head().bytes(), from_bf16->lm_head().out * from_bf16->lm_head().in * 2);
  }
  const auto ref = test::load_json(src + "/reference.json");
  Encoder enc_f32(from_f32), enc_bf16(from_bf16);
  for (const auto& c : ref["cases"]) {
    const auto input = c["input_ids"].get<std::vector<int>>();
    const EncoderOutput a = enc_f32.encode({input}), b = enc_bf16.encode({input});
    ASSERT_EQ(a.hidden.numel(), b.hidden.numel());
    EXPECT_EQ(std::vector<float>(a.hidden.data(), a.hidden.data() + a.hidden.numel()),
              std::vector<float>(b.hidden.data(), b.hidden.data() + b.hidden.numel()));
    const DecodingOptions o{.max_new_tokens = 11, .min_new_tokens = 11};
    EXPECT_EQ(generate(from_bf16, {input}, o)[0].ids, generate(from_f32, {input}, o)[0].ids);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, Bf16CheckpointTest,
    ::testing::Combine(::testing::Values("t5-tiny-random", "t5v11-tiny-random"),
                       ::testing::Values(CpuKernels::kBest, CpuKernels::kPortable)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == "t5-tiny-random" ? "T5v10" : "T5v11") +
             (std::get<1>(info.param) == CpuKernels::kBest ? "Best" : "Portable");
    });

// The bundled speller on tests/data/speller-t5-greedy.json's 200 held-out inputs, whose ids the
// fp32 engine reproduces exactly (tools.speller_parity): how many greedy outputs each compute type
// leaves unchanged. Bars: bf16 >= 99%, int8 >= 97%.
struct SpellerCase {
  ComputeType type;
  CpuKernels kernels;
  double min_equal;
};

class SpellerParityTest : public ::testing::TestWithParam<SpellerCase> {};

TEST_P(SpellerParityTest, GreedyIdsEqualFloat32sOnTheParityInputs) {
  const auto [type, kernels, min_equal] = GetParam();
  const std::string dir = test::data_dir() + "/../../models/speller-t5";
  const auto ref = test::load_json(test::data_dir() + "/speller-t5-greedy.json");
  auto model = T5Model::load(dir, {.threads = 1, .compute_type = type, .cpu_kernels = kernels});
  Tokenizer tokenizer(dir + "/spiece.model");
  const DecodingOptions o{.max_new_tokens = ref["max_new_tokens"].get<int>()};
  int equal = 0, total = 0;
  std::string first_difference;
  for (const auto& c : ref["cases"]) {
    const auto want = c["ids"].get<std::vector<int>>();
    const auto got = generate(model, {tokenizer.encode(c["text"].get<std::string>())}, o)[0].ids;
    ++total;
    if (got == want) {
      ++equal;
    } else if (first_difference.empty()) {
      first_difference = c["text"].get<std::string>();
    }
  }
  ASSERT_EQ(total, 200);
  const double share = double(equal) / total;
  RecordProperty("equal", equal);
  EXPECT_GE(share, min_equal) << equal << " of " << total << " equal; first difference: '"
                              << first_difference << "'";
  std::printf("%s%s: %d of %d greedy outputs equal fp32's\n",
              std::string(compute_type_name(type)).c_str(),
              kernels == CpuKernels::kPortable ? " (portable kernels)" : "", equal, total);
}

INSTANTIATE_TEST_SUITE_P(
    ComputeTypes, SpellerParityTest,
    ::testing::Values(SpellerCase{ComputeType::kBFloat16, CpuKernels::kBest, 0.99},
                      SpellerCase{ComputeType::kBFloat16, CpuKernels::kPortable, 0.99},
                      SpellerCase{ComputeType::kInt8, CpuKernels::kBest, 0.97},
                      SpellerCase{ComputeType::kInt8, CpuKernels::kPortable, 0.97}),
    [](const auto& info) {
      return std::string(info.param.type == ComputeType::kBFloat16 ? "BFloat16" : "Int8") +
             (info.param.kernels == CpuKernels::kBest ? "Best" : "Portable");
    });

}  // namespace
}  // namespace seqpipe::engine
