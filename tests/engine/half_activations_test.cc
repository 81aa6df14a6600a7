// Activations that cross from one op to the next GEMM in that GEMM's half input type, with no
// cast kernel between them: attention's output (the output projection's input) and the ReLU
// FFN's input GEMM, whose epilogue is the ReLU (ops::linear_relu). The kernels' host twins are
// checked against their own fp32 results rounded (CI, no GPU); the ops run on every device this
// build has (the GPU's instances skip themselves without one), the CPU refusing half outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/half_math.h"
#include "cuda/reference.h"
#include "ops.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/model.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

namespace math = cuda::math;
using test::random_values;

constexpr int64_t kHeads = 3, kHeadDim = 20, kWidth = kHeads * kHeadDim;

Tensor on(Device device, const std::vector<float>& values, std::vector<int64_t> shape) {
  std::vector<float> copy = values;
  Tensor t = Tensor::empty(shape, device);
  ops::copy_to(t, TensorView(copy.data(), shape, DataType::kF32, Device::kCpu));
  return t;
}

std::vector<float> to_host(const TensorView& t) {
  Tensor host = Tensor::empty(t.shape());
  ops::copy_to(host, t);
  return {host.data(), host.data() + host.numel()};
}

std::vector<uint16_t> bits_to_host(const TensorView& t) {
  Tensor host = Tensor::empty(t.shape(), Device::kCpu, t.dtype());
  ops::copy_to(host, t);
  return {host.data_as<uint16_t>(), host.data_as<uint16_t>() + host.numel()};
}

// Every value of `f32` as a half GEMM input of `type` rounds it.
std::vector<uint16_t> rounded(const std::vector<float>& f32, DataType type) {
  std::vector<uint16_t> bits;
  for (float x : f32) bits.push_back(math::half_input_bits(x, type == DataType::kF16));
  return bits;
}

// Three sequences of 1, 4 and 7 rows over their own keys (an encoder's packed batch), or one
// query row each at positions 0, 3 and 6 (a decoder step), on `device`, into out of `out_type`.
struct AttentionCase {
  std::vector<Tensor> q, k, v, out;
  std::vector<ops::AttentionSequence> seqs;
  PositionBias bias;
  Tensor workspace;

  AttentionCase(Device device, bool step, DataType out_type) {
    const int64_t keys[] = {1, 4, 7};
    PositionBias host_bias = test::random_bias(kHeads, 8, 40);
    bias.max_distance = host_bias.max_distance;
    bias.table = Tensor::empty(host_bias.table.shape(), device);
    ops::copy_to(bias.table, host_bias.table);
    for (int s = 0; s < 3; ++s) {
      const int64_t rows = step ? 1 : keys[s];
      const auto seed = static_cast<unsigned>(50 + 4 * s);
      q.push_back(on(device, random_values(rows * kWidth, seed), {rows, kWidth}));
      k.push_back(on(device, random_values(keys[s] * kWidth, seed + 1), {keys[s], kWidth}));
      v.push_back(on(device, random_values(keys[s] * kWidth, seed + 2, 3.0f), {keys[s], kWidth}));
      out.push_back(Tensor::empty({rows, kWidth}, device, out_type));
      seqs.push_back({q.back(), step ? keys[s] - 1 : 0, k.back(), v.back(), out.back()});
    }
    workspace = ops::attention_workspace(device, 8);
  }

  ops::AttentionArgs args(bool causal) const {
    return {seqs.data(), 3, kHeads, kHeadDim, causal ? &bias : nullptr, causal, workspace};
  }
};

// The twin writes a half out as its fp32 result rounded, nothing else: bit for bit.
TEST(HalfActivationsReference, AttentionWritesItsFp32ResultRoundedIntoAHalfOut) {
  for (const bool step : {false, true}) {
    AttentionCase f32(Device::kCpu, step, DataType::kF32);
    const auto run = [&](const AttentionCase& c) {
      if (step) {
        cuda::reference::decode_attention(c.args(true));
      } else {
        cuda::reference::attention(c.args(true));
      }
    };
    run(f32);
    for (const DataType type : {DataType::kBF16, DataType::kF16}) {
      SCOPED_TRACE(std::string(step ? "decode step " : "packed ") +
                   std::string(data_type_name(type)));
      AttentionCase half(Device::kCpu, step, type);
      run(half);
      for (int s = 0; s < 3; ++s)
        EXPECT_EQ(bits_to_host(half.out[s]), rounded(to_host(f32.out[s]), type));
    }
  }
}

class HalfActivationsTest : public ::testing::TestWithParam<Device> {};

// The o GEMM's input type on `device` for weights of `type`: half on a GPU, f32 on the CPU.
DataType projection_input_type(Device device, ComputeType type) {
  Tensor w = Tensor::empty({4, kWidth});
  std::fill(w.data(), w.data() + w.numel(), 0.25f);
  return ops::linear_input_type(ops::prepare_linear(w, {.device = device, .compute_type = type}));
}

TEST_P(HalfActivationsTest, AttentionWritesTheOutputProjectionsInputType) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  for (const bool step : {false, true}) {
    AttentionCase f32(dev, step, DataType::kF32);
    const auto run = [&](const AttentionCase& c) {
      if (step) {
        ops::decode_attention(c.args(true));
      } else {
        ops::attention(c.args(true));
      }
    };
    run(f32);
    for (const ComputeType compute : {ComputeType::kBFloat16, ComputeType::kFloat16}) {
      if (dev == Device::kCpu && compute == ComputeType::kFloat16) continue;  // not a CPU type
      const DataType in = projection_input_type(dev, compute);
      SCOPED_TRACE(std::string(step ? "decode step " : "packed ") +
                   std::string(data_type_name(in)));
      if (in == DataType::kF32) {  // the CPU: its GEMMs read f32, and a half out is refused
        EXPECT_EQ(dev, Device::kCpu);
        AttentionCase half(dev, step, DataType::kBF16);
        EXPECT_THROW(run(half), EngineError);
        continue;
      }
      AttentionCase half(dev, step, in);
      run(half);
      for (int s = 0; s < 3; ++s)
        EXPECT_EQ(bits_to_host(half.out[s]), rounded(to_host(f32.out[s]), in));
    }
  }
}

TEST_P(HalfActivationsTest, SequencesWithOutsOfTwoTypesAreRefused) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  AttentionCase mixed(dev, true, DataType::kF32);
  const Tensor other = Tensor::empty({1, kWidth}, dev, DataType::kBF16);
  mixed.seqs[1].out = other;
  EXPECT_THROW(ops::decode_attention(mixed.args(true)), EngineError);
}

// What a GEMM of weights in `type` reads of x: its values rounded to that type (fp32: as they are).
std::vector<float> as_read(std::vector<float> x, DataType type) {
  if (type == DataType::kF32) return x;
  for (float& e : x) {
    const uint16_t h = math::half_input_bits(e, type == DataType::kF16);
    e = type == DataType::kF16 ? math::f16_float(h) : math::bf16_float(h);
  }
  return x;
}

// relu(x W^T) in double over the values the GEMM reads.
std::vector<float> linear_then_relu(const std::vector<float>& x, const std::vector<float>& w,
                                    int64_t rows, int64_t in, int64_t out) {
  std::vector<float> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;
      for (int64_t i = 0; i < in; ++i) sum += double(x[size_t(r * in + i)]) * w[size_t(o * in + i)];
      y[size_t(r * out + o)] = static_cast<float>(std::max(sum, 0.0));
    }
  }
  return y;
}

TEST_P(HalfActivationsTest, LinearReluIsLinearThenReluInEitherOutputType) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  const int64_t rows = 5, in = 64, out = 96;
  const std::vector<float> x = random_values(rows * in, 60), wv = random_values(out * in, 61, 0.2f);
  Tensor w = Tensor::empty({out, in});
  std::copy(wv.begin(), wv.end(), w.data());
  for (const ComputeType type :
       {ComputeType::kFloat32, ComputeType::kBFloat16, ComputeType::kFloat16}) {
    if (dev == Device::kCpu && type == ComputeType::kFloat16) continue;  // not a CPU type
    SCOPED_TRACE(std::string(compute_type_name(type)));
    const LinearWeight lw = ops::prepare_linear(w, {.device = dev, .compute_type = type});
    // A GPU's half GEMM reads x in its weight's type; the CPU's bf16 GEMM reads x in fp32.
    const DataType x_type = dev == Device::kCpu ? DataType::kF32 : lw.dtype;
    const std::vector<float> want =
        linear_then_relu(as_read(x, x_type), as_read(wv, lw.dtype), rows, in, out);
    const Tensor xd = on(dev, x, {rows, in});
    const Tensor y = Tensor::empty({rows, out}, dev);
    ops::linear_relu(xd, lw, y);
    const std::vector<float> got = to_host(y);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_GE(got[i], 0.0f) << i;
      const float tolerance = 1e-5f * std::max(1.0f, std::abs(want[i]));  // fp32 sums of 64
      ASSERT_NEAR(got[i], want[i], tolerance) << i;
    }
    const DataType half = ops::linear_input_type(lw);
    if (half == DataType::kF32) continue;
    const Tensor yh = Tensor::empty({rows, out}, dev, half);
    ops::linear_relu(xd, lw, yh);
    // The epilogue rounds the GEMM's own fp32 result: the f32 run's values rounded, within one
    // ulp where the two runs' sums differ in their last bit.
    const std::vector<uint16_t> bits = bits_to_host(yh);
    for (size_t i = 0; i < bits.size(); ++i) {
      const float value =
          half == DataType::kF16 ? math::f16_float(bits[i]) : math::bf16_float(bits[i]);
      const float ulp = half == DataType::kF16 ? 1.0f / 1024 : 1.0f / 128;
      ASSERT_NEAR(value, got[i], std::abs(got[i]) * ulp + 1e-6f) << i;
    }
  }
}

TEST_P(HalfActivationsTest, LinearReluRefusesAHalfOutputItsGemmCannotWrite) {
  const Device dev = GetParam();
  SEQPIPE_SKIP_WITHOUT(dev);
  Tensor w = Tensor::empty({8, 16});
  std::fill(w.data(), w.data() + w.numel(), 0.5f);
  const Tensor x = Tensor::empty({2, 16}, dev);
  for (const ComputeType type : {ComputeType::kFloat32, ComputeType::kBFloat16}) {
    const LinearWeight lw = ops::prepare_linear(w, {.device = dev, .compute_type = type});
    // fp16 is no weight's type here, and a plain linear never writes a half y.
    EXPECT_THROW(ops::linear_relu(x, lw, Tensor::empty({2, 8}, dev, DataType::kF16)), EngineError);
    const Tensor half_y = Tensor::empty({2, 8}, dev, DataType::kBF16);
    EXPECT_THROW(ops::linear(x, lw, half_y), EngineError);
    if (dev == Device::kCpu || type == ComputeType::kFloat32) {
      EXPECT_THROW(ops::linear_relu(x, lw, half_y), EngineError);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, HalfActivationsTest,
                         ::testing::Values(Device::kCpu, Device::kCuda), [](const auto& info) {
                           return std::string(info.param == Device::kCpu ? "Cpu" : "Cuda");
                         });

}  // namespace
}  // namespace seqpipe::engine
