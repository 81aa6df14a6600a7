// The safetensors reader and writer: round trips in every storage type, tensors read into memory
// of their own (an overwrite of the file after the load changes nothing), exact F16/BF16 rounding
// (subnormals, negatives, ties, overflow), and a malformed header (an overflowing shape, a header
// length past the file or the cap) rejected with the file and tensor named.
#include "seqpipe/engine/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "file_test_util.h"

namespace seqpipe::engine {
namespace {

using test::engine_error_of;
using test::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A safetensors file from raw parts: the 8-byte little-endian header length, the header text
// and the data section, for headers the writer would never produce.
std::string raw_safetensors(const std::string& header, const std::string& data = "",
                            uint64_t header_len_field = UINT64_MAX) {
  const uint64_t len = header_len_field == UINT64_MAX ? header.size() : header_len_field;
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return bytes + header + data;
}

std::string float_bytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

TEST(SafetensorsTest, F32RoundTripIsExactAndHeaderDescribesTensors) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::vector<float> a = {1.5f, -2.25f, 0.0f, 3e-39f /* subnormal */, 1e30f, -7.0f};
  const std::vector<float> b = {0.125f, 42.0f, -0.0f, 6.0f};
  write_safetensors(path, {{"a", {2, 3}, a.data()}, {"b.weight", {4}, b.data()}});

  SafeTensorsFile file(path);
  ASSERT_EQ(file.tensors().size(), 2u);
  const TensorInfo& info_a = file.tensors().at("a");
  EXPECT_EQ(info_a.dtype, StorageType::kF32);
  EXPECT_EQ(info_a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(info_a.end - info_a.begin, 6u * 4u);
  EXPECT_TRUE(file.contains("b.weight"));
  EXPECT_FALSE(file.contains("c"));

  Tensor ta = file.load("a", {2, 3});
  Tensor tb = file.load("b.weight", {4});
  EXPECT_EQ(ta.shape(), (std::vector<int64_t>{2, 3}));
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(ta.data()[i]), std::bit_cast<uint32_t>(a[i]));
  for (size_t i = 0; i < b.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(tb.data()[i]), std::bit_cast<uint32_t>(b[i]));
}

TEST(SafetensorsTest, TensorsAreReadIntoMemoryOfTheirOwn) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::vector<float> a = {1, 2, 3, 4, 5};
  const std::vector<float> b = {6, 7, 8};
  write_safetensors(path, {{"a", {5}, a.data()}, {"b", {3}, b.data()}});

  // The writer pads the header so that the data section starts 8-byte aligned.
  const std::string bytes = test::read_file(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ((8 + header_len) % 8, 0u);

  SafeTensorsFile file(path);
  EXPECT_EQ(file.data_bytes(), bytes.size() - 8 - header_len);
  EXPECT_EQ(file.tensor_data_end(), file.data_bytes());
  Tensor first = file.load("a", {5});
  Tensor again = file.load("a", {5});
  EXPECT_NE(first.data(), again.data());
  // The file overwritten in place, first emptied (as `cp` does): a mapping of it would now SIGBUS
  // on the first read, or show the new numbers; what was read stays as it was.
  test::write_file(path, "");
  const std::vector<float> other = {-1, -2, -3, -4, -5};
  write_safetensors(path, {{"a", {5}, other.data()}});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(first.data()[i], a[static_cast<size_t>(i)]);
  EXPECT_EQ(again.data()[4], 5.0f);
}

TEST(SafetensorsTest, TensorViewsOutliveTheFileObject) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::vector<float> a = {9, 8, 7};
  write_safetensors(path, {{"a", {3}, a.data()}});
  Tensor t;
  {
    SafeTensorsFile file(path);
    t = file.load("a", {3});
  }
  EXPECT_EQ(t.data()[0], 9.0f);
  EXPECT_EQ(t.data()[2], 7.0f);
}

TEST(SafetensorsTest, MisalignedF32DataIsCopiedCorrectly) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  // Padding the header to 2 mod 8 puts the data off 4-byte alignment: the loader must copy.
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  while ((8 + header.size()) % 8 != 2) header.push_back(' ');
  test::write_file(path, raw_safetensors(header, float_bytes({1.25f, -3.5f})));
  SafeTensorsFile file(path);
  Tensor x = file.load("x", {2});
  EXPECT_EQ(x.data()[0], 1.25f);
  EXPECT_EQ(x.data()[1], -3.5f);
}

TEST(SafetensorsTest, F16Conversion) {
  struct Case {
    float value;
    uint16_t bits;
  };
  const Case cases[] = {
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {0.5f, 0x3800},
      {0.1f, 0x2e66},                      // rounds to 0.0999755859375
      {65504.0f, 0x7bff},                  // largest finite
      {65519.0f, 0x7bff},                  // below the halfway point to 65536
      {65520.0f, 0x7c00},                  // the tie rounds to even: infinity
      {std::ldexp(1.0f, -14), 0x0400},     // smallest normal
      {std::ldexp(1023.0f, -24), 0x03ff},  // largest subnormal
      {std::ldexp(1.0f, -24), 0x0001},     // smallest subnormal
      {std::ldexp(3.0f, -24), 0x0003},
      {-std::ldexp(1.0f, -24), 0x8001},
      {std::ldexp(1.0f, -25), 0x0000},  // tie between 0 and 2^-24: to even, zero
      {std::ldexp(3.0f, -25), 0x0002},  // tie between 1 and 2 ulps: to even, 2
      {std::ldexp(1.0f, -26), 0x0000},
      {std::ldexp(2047.0f, -25), 0x0400},      // rounds up out of the subnormals
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},  // tie: to even
      {1.0f + std::ldexp(3.0f, -11), 0x3c02},  // tie: to even
      {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20), 0x3c01},  // past the tie
      {-0.0f, 0x8000},
      {std::numeric_limits<float>::infinity(), 0x7c00},
      {-std::numeric_limits<float>::infinity(), 0xfc00},
      {1e10f, 0x7c00},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_f16(c.value), c.bits) << "value " << c.value;
  }
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_float(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0xc000), -2.0f);
  EXPECT_EQ(f16_to_float(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::signbit(f16_to_float(0x8000)));
  EXPECT_EQ(f16_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  // Every finite and infinite half survives half -> float -> half unchanged.
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_f16(f), h) << "half bits 0x" << std::hex << h;
  }
}

TEST(SafetensorsTest, BF16Conversion) {
  struct Case {
    float value;
    uint16_t bits;
  };
  const Case cases[] = {
      {1.0f, 0x3f80},
      {-2.5f, 0xc020},
      {3.0f, 0x4040},
      {1.0f + std::ldexp(1.0f, -8), 0x3f80},                          // tie: to even
      {1.0f + std::ldexp(3.0f, -8), 0x3f82},                          // tie: to even
      {1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -16), 0x3f81},  // past the tie
      {std::ldexp(1.0f, -130), 0x0008},                               // float subnormal
      {-std::ldexp(1.0f, -133), 0x8001},
      {std::numeric_limits<float>::max(), 0x7f80},  // rounds to infinity
      {-0.0f, 0x8000},
      {std::numeric_limits<float>::infinity(), 0x7f80},
      {-std::numeric_limits<float>::infinity(), 0xff80},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_bf16(c.value), c.bits) << "value " << c.value;
  }
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc020), -2.5f);
  EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low 16 bits must not turn into infinity.
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::bit_cast<float>(0x7f800001u)))));
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), b) << "bf16 bits 0x" << std::hex << b;
  }
}

TEST(SafetensorsTest, F16AndBF16FilesLoadAsRoundedFloats) {
  TempDir dir;
  const std::vector<float> values = {1.0f,
                                     -2.5f,
                                     0.1f,
                                     1e-7f,
                                     -65504.0f,
                                     3.14159f,
                                     std::ldexp(3.0f, -25),
                                     1.0f + std::ldexp(3.0f, -11)};
  for (StorageType dtype : {StorageType::kF16, StorageType::kBF16}) {
    const std::string path =
        dir.file(dtype == StorageType::kF16 ? "f16.safetensors" : "bf16.safetensors");
    write_safetensors(path, {{"w", {2, 4}, values.data(), dtype}});
    SafeTensorsFile file(path);
    const TensorInfo& info = file.tensors().at("w");
    EXPECT_EQ(info.dtype, dtype);
    EXPECT_EQ(info.end - info.begin, 8u * 2u);
    Tensor w = file.load("w", {2, 4});
    Tensor again = file.load("w", {2, 4});
    EXPECT_NE(w.data(), again.data()) << "a converted tensor is a fresh copy";
    for (size_t i = 0; i < values.size(); ++i) {
      const float want = dtype == StorageType::kF16 ? f16_to_float(float_to_f16(values[i]))
                                                    : bf16_to_float(float_to_bf16(values[i]));
      EXPECT_EQ(w.data()[i], want) << "element " << i;
    }
  }
}

TEST(SafetensorsTest, MetadataEntryIsIgnored) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  test::write_file(path, raw_safetensors(header, float_bytes({2.0f})));
  SafeTensorsFile file(path);
  EXPECT_EQ(file.tensors().size(), 1u);
  EXPECT_EQ(file.load("x", {1}).data()[0], 2.0f);
}

// Each malformed file is refused with the file named, and the tensor named when one is at fault.
TEST(SafetensorsTest, MalformedFilesNameTheFileAndTensor) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  auto error_for = [&](const std::string& bytes) {
    test::write_file(path, bytes);
    return engine_error_of([&] { SafeTensorsFile file(path); });
  };
  const std::string two_floats = float_bytes({1, 2});

  EXPECT_THAT(engine_error_of([&] { SafeTensorsFile file(dir.file("absent.safetensors")); }),
              HasSubstr(dir.file("absent.safetensors")));
  EXPECT_THAT(error_for("abc"), AllOf(HasSubstr(path), HasSubstr("truncated")));
  EXPECT_THAT(error_for(raw_safetensors("{}", "", 1000)),
              AllOf(HasSubstr(path), HasSubstr("header length 1000")));
  EXPECT_THAT(error_for(raw_safetensors("{\"x\": [", two_floats)),
              AllOf(HasSubstr(path), HasSubstr("JSON")));
  EXPECT_THAT(error_for(raw_safetensors("[1, 2]", two_floats)),
              AllOf(HasSubstr(path), HasSubstr("JSON object")));
  EXPECT_THAT(error_for(raw_safetensors(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                                        two_floats)),
              AllOf(HasSubstr(path), HasSubstr("'w'"), HasSubstr("I64")));
  EXPECT_THAT(error_for(raw_safetensors(R"({"w":{"dtype":"F32","shape":[2]}})", two_floats)),
              AllOf(HasSubstr(path), HasSubstr("'w'"), HasSubstr("data_offsets")));
  EXPECT_THAT(error_for(raw_safetensors(
                  R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", two_floats)),
              AllOf(HasSubstr(path), HasSubstr("'w'"), HasSubstr("shape")));
  EXPECT_THAT(error_for(raw_safetensors(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                                        two_floats)),
              AllOf(HasSubstr(path), HasSubstr("'w'"), HasSubstr("data_offsets")));
  EXPECT_THAT(error_for(raw_safetensors(
                  R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", two_floats)),
              AllOf(HasSubstr(path), HasSubstr("'w'"), HasSubstr("truncated")));
  // A shape whose product wraps to the byte range (2^32 * 2^32 * 4 = 2^66 = 0 mod 2^64), and one
  // whose byte count alone wraps (2^62 floats): refused, not sized from a wrapped number.
  EXPECT_THAT(error_for(raw_safetensors(
                  R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})",
                  two_floats)),
              AllOf(HasSubstr(path), HasSubstr("'w'"), HasSubstr("overflows")));
  EXPECT_THAT(error_for(raw_safetensors(
                  R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})",
                  two_floats)),
              AllOf(HasSubstr(path), HasSubstr("'w'"), HasSubstr("data_offsets")));
  EXPECT_THAT(error_for(raw_safetensors(
                  R"({"w":{"dtype":"F32","shape":[9223372036854775808,0],"data_offsets":[0,0]}})",
                  two_floats)),
              AllOf(HasSubstr(path), HasSubstr("'w'"), HasSubstr("overflows")));
}

// A header length over the cap is refused before anything is read or parsed, even when the
// file is that long (a sparse file here: its length costs no disk).
TEST(SafetensorsTest, AHeaderOverTheCapIsRefusedUnread) {
  TempDir dir;
  const std::string path = dir.file("huge.safetensors");
  const uint64_t header_len = 64ull << 20;
  test::write_file(path, raw_safetensors("{", "", header_len));
  std::filesystem::resize_file(path, 8 + header_len);
  EXPECT_THAT(engine_error_of([&] { SafeTensorsFile file(path); }),
              AllOf(HasSubstr(path), HasSubstr("header length 67108864")));
}

TEST(SafetensorsTest, LoadNamesAMissingOrMisShapedTensor) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::vector<float> values(6, 1.0f);
  write_safetensors(path,
                    {{"encoder.block.0.layer.0.SelfAttention.q.weight", {2, 3}, values.data()}});
  SafeTensorsFile file(path);
  EXPECT_THAT(engine_error_of([&] {
                file.load("encoder.block.0.layer.0.SelfAttention.k.weight", {2, 3});
              }),
              AllOf(HasSubstr(path), HasSubstr("missing"),
                    HasSubstr("encoder.block.0.layer.0.SelfAttention.k.weight")));
  EXPECT_THAT(engine_error_of([&] {
                file.load("encoder.block.0.layer.0.SelfAttention.q.weight", {3, 2});
              }),
              AllOf(HasSubstr(path), HasSubstr("encoder.block.0.layer.0.SelfAttention.q.weight"),
                    HasSubstr("[2, 3]"), HasSubstr("[3, 2]")));
}

}  // namespace
}  // namespace seqpipe::engine
