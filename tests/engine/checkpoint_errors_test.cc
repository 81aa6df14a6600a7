// T5Model::load on broken copies of the fixture checkpoints: every defect is an EngineError that
// names the file and the tensor or key at fault, before any memory is sized from it. Also: F32
// weights are used as stored, BF16/F16 ones are converted at load, and a weights file
// overwritten after the load changes nothing the model holds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "file_test_util.h"
#include "seqpipe/engine/model.h"
#include "seqpipe/engine/safetensors.h"
#include "seqpipe/generation/model_files.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

namespace fs = std::filesystem;
using test::engine_error_of;
using test::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

// One tensor of a checkpoint, decoded to fp32, to be written back (possibly altered).
struct StoredTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

std::vector<StoredTensor> read_tensors(const std::string& path) {
  SafeTensorsFile file(path);
  std::vector<StoredTensor> out;
  for (const auto& [name, info] : file.tensors()) {
    const Tensor t = file.load(name, info.shape);
    out.push_back({name, info.shape, std::vector<float>(t.data(), t.data() + t.numel())});
  }
  return out;
}

void write_tensors(const std::string& path, const std::vector<StoredTensor>& tensors,
                   StorageType dtype = StorageType::kF32) {
  std::vector<TensorToWrite> to_write;
  for (const StoredTensor& t : tensors)
    to_write.push_back({t.name, t.shape, t.values.data(), dtype});
  write_safetensors(path, to_write);
}

// A scratch copy of a fixture checkpoint that a test then breaks.
class CheckpointCopy {
 public:
  explicit CheckpointCopy(const std::string& fixture) {
    fs::copy(test::data_dir() + "/" + fixture, dir_.path(), fs::copy_options::recursive);
  }

  std::string dir() const { return dir_.path().string(); }
  std::string config_path() const { return dir_.file("config.json"); }
  std::string weights_path() const { return dir_.file("model.safetensors"); }

  void edit_config(const std::function<void(nlohmann::json&)>& edit) const {
    nlohmann::json config = test::load_json(config_path());
    edit(config);
    test::write_file(config_path(), config.dump(2));
  }
  void edit_tensors(const std::function<void(std::vector<StoredTensor>&)>& edit) const {
    std::vector<StoredTensor> tensors = read_tensors(weights_path());
    edit(tensors);
    write_tensors(weights_path(), tensors);
  }
  void drop_tensor(const std::string& name) const {
    edit_tensors([&](std::vector<StoredTensor>& tensors) {
      const auto removed =
          std::erase_if(tensors, [&](const StoredTensor& t) { return t.name == name; });
      ASSERT_EQ(removed, 1u) << name << " is not in the fixture";
    });
  }
  std::string load_error() const {
    return engine_error_of([&] { T5Model::load(dir(), {.threads = 1}); });
  }

 private:
  TempDir dir_;
};

TEST(CheckpointErrorsTest, UnbrokenCopiesLoad) {
  for (const char* fixture : {"t5-tiny-random", "t5v11-tiny-random"}) {
    CheckpointCopy copy(fixture);
    EXPECT_NO_THROW(T5Model::load(copy.dir(), {.threads = 1})) << fixture;
    // Re-writing every tensor through the test's own reader and writer changes nothing either.
    copy.edit_tensors([](std::vector<StoredTensor>&) {});
    EXPECT_NO_THROW(T5Model::load(copy.dir(), {.threads = 1})) << fixture;
  }
}

TEST(CheckpointErrorsTest, MissingDirectoryIsNamed) {
  TempDir dir;
  const std::string missing = dir.file("no-model-here");
  EXPECT_THAT(engine_error_of([&] { T5Model::load(missing); }), HasSubstr(missing));
}

TEST(CheckpointErrorsTest, MissingConfigIsNamed) {
  CheckpointCopy copy("t5-tiny-random");
  fs::remove(copy.config_path());
  EXPECT_THAT(copy.load_error(), HasSubstr(copy.config_path()));
}

TEST(CheckpointErrorsTest, MissingWeightsFileIsNamed) {
  CheckpointCopy copy("t5-tiny-random");
  fs::remove(copy.weights_path());
  EXPECT_THAT(copy.load_error(), HasSubstr(copy.weights_path()));
}

TEST(CheckpointErrorsTest, ConfigThatIsNotJsonIsNamed) {
  CheckpointCopy copy("t5-tiny-random");
  test::write_file(copy.config_path(), "{\"d_model\": 64,\n \"d_kv\": ");
  EXPECT_THAT(copy.load_error(), AllOf(HasSubstr(copy.config_path()), HasSubstr("JSON")));
}

TEST(CheckpointErrorsTest, BadConfigValueNamesFileAndKey) {
  CheckpointCopy copy("t5-tiny-random");
  copy.edit_config([](nlohmann::json& c) { c["num_heads"] = "4"; });
  EXPECT_THAT(copy.load_error(), AllOf(HasSubstr(copy.config_path()), HasSubstr("'num_heads'")));
}

TEST(CheckpointErrorsTest, MissingTensorIsNamed) {
  CheckpointCopy copy("t5-tiny-random");
  const std::string name = "decoder.block.1.layer.1.EncDecAttention.k.weight";
  copy.drop_tensor(name);
  EXPECT_THAT(copy.load_error(), AllOf(HasSubstr(copy.weights_path()), HasSubstr(name)));
}

TEST(CheckpointErrorsTest, MissingPositionBiasIsNamed) {
  CheckpointCopy copy("t5v11-tiny-random");
  const std::string name = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight";
  copy.drop_tensor(name);
  EXPECT_THAT(copy.load_error(), AllOf(HasSubstr(copy.weights_path()), HasSubstr(name)));
}

TEST(CheckpointErrorsTest, MisShapedTensorIsNamedWithBothShapes) {
  CheckpointCopy copy("t5-tiny-random");
  const std::string name = "encoder.block.1.layer.1.DenseReluDense.wi.weight";
  copy.edit_tensors([&](std::vector<StoredTensor>& tensors) {
    for (StoredTensor& t : tensors) {
      if (t.name == name) t.shape = {64, 128};  // stored transposed: [d_model, d_ff]
    }
  });
  EXPECT_THAT(copy.load_error(), AllOf(HasSubstr(copy.weights_path()), HasSubstr(name),
                                       HasSubstr("[64, 128]"), HasSubstr("[128, 64]")));
}

TEST(CheckpointErrorsTest, ConfigDisagreeingWithWeightsNamesTheTensor) {
  CheckpointCopy copy("t5-tiny-random");
  copy.edit_config([](nlohmann::json& c) { c["d_ff"] = 256; });
  EXPECT_THAT(copy.load_error(),
              AllOf(HasSubstr(copy.weights_path()), HasSubstr("DenseReluDense.wi.weight"),
                    HasSubstr("[256, 64]")));
}

TEST(CheckpointErrorsTest, GatedConfigOverReluWeightsNamesTheMissingTensor) {
  CheckpointCopy copy("t5-tiny-random");
  copy.edit_config([](nlohmann::json& c) {
    c["feed_forward_proj"] = "gated-gelu";
    c["dense_act_fn"] = "gelu_new";
  });
  EXPECT_THAT(copy.load_error(),
              AllOf(HasSubstr(copy.weights_path()), HasSubstr("DenseReluDense.wi_0.weight")));
}

TEST(CheckpointErrorsTest, TruncatedWeightsFileIsNamed) {
  CheckpointCopy copy("t5-tiny-random");
  const std::string bytes = test::read_file(copy.weights_path());
  test::write_file(copy.weights_path(), bytes.substr(0, bytes.size() / 2));
  EXPECT_THAT(copy.load_error(), AllOf(HasSubstr(copy.weights_path()), HasSubstr("truncated")));
  test::write_file(copy.weights_path(), bytes.substr(0, 5));  // not even the header length
  EXPECT_THAT(copy.load_error(), AllOf(HasSubstr(copy.weights_path()), HasSubstr("truncated")));
}

TEST(CheckpointErrorsTest, HeaderLengthBeyondTheFileIsNamed) {
  CheckpointCopy copy("t5-tiny-random");
  std::string bytes = test::read_file(copy.weights_path());
  const uint64_t too_long = bytes.size();  // more than the bytes after the length field
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<size_t>(i)] = static_cast<char>((too_long >> (8 * i)) & 0xff);
  test::write_file(copy.weights_path(), bytes);
  EXPECT_THAT(copy.load_error(), AllOf(HasSubstr(copy.weights_path()), HasSubstr("header length")));
}

// A tensor whose header shape product overflows 64 bits (2^32 x 2^32 floats: 2^66 bytes, 0 mod
// 2^64, so a wrapped product matches an empty byte range) is refused at the header, not packed.
TEST(CheckpointErrorsTest, OverflowingShapeIsNamedBeforeAnyAllocation) {
  CheckpointCopy copy("t5-tiny-random");
  const std::string bytes = test::read_file(copy.weights_path());
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<uint8_t>(bytes[i]);
  auto header = nlohmann::json::parse(bytes.substr(8, header_len));
  const std::string name = "encoder.block.0.layer.0.SelfAttention.q.weight";
  const uint64_t begin = header[name]["data_offsets"][0].get<uint64_t>();
  header[name]["shape"] = {uint64_t{1} << 32, uint64_t{1} << 32};
  header[name]["data_offsets"] = {begin, begin};
  const std::string text = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  test::write_file(copy.weights_path(), out + text + bytes.substr(8 + header_len));
  EXPECT_THAT(copy.load_error(),
              AllOf(HasSubstr(copy.weights_path()), HasSubstr(name), HasSubstr("overflows")));
}

// A config.json over the cap is refused before it is read, with the file and the cap named.
TEST(CheckpointErrorsTest, OversizedConfigIsRefusedUnparsed) {
  CheckpointCopy copy("t5-tiny-random");
  const std::string path = copy.dir() + "/config.json";
  std::string text = test::read_file(path);
  text.insert(text.find('{') + 1,
              "\"junk\": \"" + std::string(generation::kMaxModelConfigBytes, 'x') + "\",");
  test::write_file(path, text);
  EXPECT_THAT(copy.load_error(), AllOf(HasSubstr(path), HasSubstr("larger than")));
}

// The model holds its own copy of the weights: the file overwritten after the load (emptied
// first, as `cp` does, then other numbers) changes nothing it computes, and cannot crash it.
TEST(CheckpointErrorsTest, WeightsOverwrittenAfterTheLoadChangeNothing) {
  CheckpointCopy copy("t5-tiny-random");
  const ModelOptions options{.threads = 1, .cpu_kernels = CpuKernels::kPortable};
  auto model = T5Model::load(copy.dir(), options);
  const Tensor before = model->shared_embedding();
  const std::vector<float> kept(before.data(), before.data() + before.numel());
  auto tensors = read_tensors(copy.weights_path());
  for (auto& t : tensors)
    for (float& v : t.values) v = -v;
  test::write_file(copy.weights_path(), "");
  write_tensors(copy.weights_path(), tensors);
  const Tensor& after = model->shared_embedding();
  ASSERT_EQ(after.numel(), static_cast<int64_t>(kept.size()));
  for (size_t i = 0; i < kept.size(); ++i) ASSERT_EQ(after.data()[i], kept[i]) << i;
}

TEST(CheckpointErrorsTest, UntiedCheckpointWithoutLmHeadIsNamed) {
  CheckpointCopy copy("t5v11-tiny-random");
  copy.drop_tensor("lm_head.weight");
  EXPECT_THAT(copy.load_error(),
              AllOf(HasSubstr(copy.weights_path()), HasSubstr("lm_head.weight")));
}

TEST(CheckpointErrorsTest, TiedCheckpointDeclaredUntiedNamesLmHead) {
  CheckpointCopy copy("t5-tiny-random");  // saved tied: no lm_head.weight in the file
  copy.edit_config([](nlohmann::json& c) { c["tie_word_embeddings"] = false; });
  EXPECT_THAT(copy.load_error(),
              AllOf(HasSubstr(copy.weights_path()), HasSubstr("lm_head.weight")));
}

// The portable kernels read fp32 linear weights as stored, but for the concatenated projections
// (every self-attention's q|k|v, the decoder's cross k|v of every layer: copies); the best ones on
// an AVX-512 CPU read a packed copy (packed_gemm_f32), counted as converted.
TEST(CheckpointErrorsTest, F32WeightsAreUsedAsStored) {
  auto model = T5Model::load(test::data_dir() + "/t5-tiny-random",
                             {.threads = 1, .cpu_kernels = CpuKernels::kPortable});
  EXPECT_GT(model->mapped_weight_bytes(), 0u);
  int64_t concatenated = model->decoder_cross_kv().bytes();
  for (const auto& b : model->decoder_blocks()) concatenated += b.self_attention.qkv.bytes();
  for (const auto& b : model->encoder_blocks()) concatenated += b.attention.qkv.bytes();
  EXPECT_EQ(model->converted_weight_bytes(), uint64_t(concatenated));
  auto best = T5Model::load(test::data_dir() + "/t5-tiny-random", {.threads = 1});
  // Packing drops no byte (t5-tiny's dimensions are multiples of 64); a tied lm_head, which the
  // portable kernels read from the embedding as stored, gets a packed copy of its own.
  EXPECT_GE(best->mapped_weight_bytes() + best->converted_weight_bytes(),
            model->mapped_weight_bytes());
}

void expect_rounded(const Tensor& got, const Tensor& want, double relative_tolerance) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) {
    ASSERT_LE(std::abs(got.data()[i] - want.data()[i]),
              relative_tolerance * std::abs(want.data()[i]) + 1e-7)
        << "element " << i;
  }
}

TEST(CheckpointErrorsTest, HalfPrecisionCopiesLoadConverted) {
  const std::string fixture = test::data_dir() + "/t5v11-tiny-random";
  // Portable kernels: their fp32 linear weights are row-major tensors to compare.
  const ModelOptions options{.threads = 1, .cpu_kernels = CpuKernels::kPortable};
  auto f32 = T5Model::load(fixture, options);
  for (StorageType dtype : {StorageType::kBF16, StorageType::kF16}) {
    CheckpointCopy copy("t5v11-tiny-random");
    write_tensors(copy.weights_path(), read_tensors(fixture + "/model.safetensors"), dtype);
    std::shared_ptr<const T5Model> half;
    ASSERT_NO_THROW(half = T5Model::load(copy.dir(), options));
    EXPECT_GT(half->converted_weight_bytes(), 0u);
    EXPECT_EQ(half->mapped_weight_bytes(), 0u);
    EXPECT_EQ(half->converted_weight_bytes(),
              f32->mapped_weight_bytes() + f32->converted_weight_bytes())
        << "every weight converted, to as many fp32 bytes as the fp32 checkpoint's model holds";
    // Converted values are the fp32 ones rounded to 8 (bf16) or 11 (f16) significant bits.
    const double tolerance =
        dtype == StorageType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    expect_rounded(half->shared_embedding(), f32->shared_embedding(), tolerance);
    expect_rounded(half->lm_head().weight, f32->lm_head().weight, tolerance);
  }
}

}  // namespace
}  // namespace seqpipe::engine
