// The decoder's KV cache in the model's half compute type on a GPU (ops::kv_cache_type): the
// cache elements' rounding (src/cuda/attention_math.h), the fused decode kernel's host twin over
// a bf16 / fp16 cache against the CPU backend over the same rounded values (what CI checks of
// the kernel without a GPU), the op seam's checks, the cache's size, and on a GPU (skipped
// without one) the kernel, the conversion and a decoder on a half cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/kernels.h"
#include "cuda/attention_math.h"
#include "cuda/half_math.h"
#include "cuda/reference.h"
#include "ops.h"
#include "seqpipe/engine/decoder.h"
#include "seqpipe/engine/encoder.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/kv_cache.h"
#include "seqpipe/engine/model.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

namespace math = cuda::math;
using test::random_values;

TensorView view(std::vector<float>& v, std::vector<int64_t> shape) {
  return TensorView(v.data(), shape, DataType::kF32, Device::kCpu);
}

// x as a cache of `type` stores it (bits) and reads it back.
uint16_t cache_bits(float x, DataType type) {
  if (type == DataType::kF16) {
    math::F16 e{};
    math::cache_store(e, x);
    return e.bits;
  }
  math::Bf16 e{};
  math::cache_store(e, x);
  return e.bits;
}
float cache_value(uint16_t bits, DataType type) {
  return type == DataType::kF16 ? math::cache_load(math::F16{bits})
                                : math::cache_load(math::Bf16{bits});
}
float through_cache(float x, DataType type) {
  return cache_value(cache_bits(x, type), type);
}

TEST(HalfKvCacheMath, ElementsRoundAsAHalfGemmInputAndReadBackExactly) {
  std::vector<float> x = random_values(200, 3, 40.0f);
  for (float special : {1.00390625f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -1e6f, 3e-8f})
    x.push_back(special);
  std::vector<uint16_t> cpu_bf16(x.size());
  cpu::to_bf16(x.data(), static_cast<int64_t>(x.size()), cpu_bf16.data());
  for (size_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE(x[i]);
    EXPECT_EQ(cache_bits(x[i], DataType::kBF16), cpu_bf16[i]) << "the CPU backend's bf16";
    EXPECT_EQ(cache_bits(x[i], DataType::kF16), math::half_input_bits(x[i], true));
    if (std::abs(x[i]) < 65520.0f) {
      _Float16 h = static_cast<_Float16>(x[i]);
      uint16_t want;
      std::memcpy(&want, &h, sizeof want);
      EXPECT_EQ(cache_bits(x[i], DataType::kF16), want) << "the compiler's _Float16";
    } else {  // past fp16's range: HF's clamp, not an infinity that would make the scores NaN
      const float clamp_in_f16 = math::f16_float(math::f16_bits(math::float_bits(math::kF16Clamp)));
      EXPECT_EQ(std::abs(through_cache(x[i], DataType::kF16)), clamp_in_f16);  // 64512
    }
    for (DataType type : {DataType::kBF16, DataType::kF16}) {
      const uint16_t bits = cache_bits(x[i], type);
      EXPECT_EQ(cache_bits(cache_value(bits, type), type), bits) << "a half value stores as itself";
    }
  }
}

// One decode step's attention over a `type` cache: the kernel's host twin on the half cache,
// and the CPU backend's ops::decode_attention on an f32 cache of the same (rounded) values, the
// step's new key and value rounded before they join it, as the kernel rounds them as it stores.
struct HalfCase {
  int64_t heads = 2, d = 64;
  std::vector<int64_t> q_pos, k_rows;
  bool self = true;  // bias, causal, append (else cross-attention: none of them)
};

void check_half_cache(DataType type, const HalfCase& c, unsigned seed) {
  const int64_t width = c.heads * c.d, seqs = static_cast<int64_t>(c.k_rows.size());
  const PositionBias bias = test::random_bias(c.heads, 8, seed);

  std::vector<std::vector<float>> q, cpu_k, cpu_v, new_k, new_v, cpu_new_k, cpu_new_v;
  std::vector<std::vector<float>> cpu_out, ref_out;
  std::vector<std::vector<uint16_t>> ref_k, ref_v;
  std::vector<ops::AttentionSequence> cpu_seqs, ref_seqs;
  const auto rounded = [&](std::vector<float> v) {
    for (float& x : v) x = through_cache(x, type);
    return v;
  };
  const auto bits = [&](const std::vector<float>& v) {
    std::vector<uint16_t> out;
    for (float x : v) out.push_back(cache_bits(x, type));
    return out;
  };
  for (int64_t s = 0; s < seqs; ++s) {
    const unsigned base = seed + 10 * static_cast<unsigned>(s);
    const auto n = static_cast<size_t>(c.k_rows[s] * width), w = static_cast<size_t>(width);
    q.push_back(random_values(w, base + 1));
    cpu_k.push_back(rounded(random_values(n, base + 2, 2.0f)));
    cpu_v.push_back(rounded(random_values(n, base + 3)));
    new_k.push_back(random_values(w, base + 4, 2.0f));
    new_v.push_back(random_values(w, base + 5));
    cpu_new_k.push_back(rounded(new_k.back()));
    cpu_new_v.push_back(rounded(new_v.back()));
    ref_k.push_back(bits(cpu_k.back()));
    ref_v.push_back(bits(cpu_v.back()));
    cpu_out.emplace_back(w, 0.0f);
    ref_out.emplace_back(w, 0.0f);
  }
  for (int64_t s = 0; s < seqs; ++s) {
    const std::vector<int64_t> kv_shape = {c.k_rows[s], width};
    const auto half = [&](std::vector<uint16_t>& v) {
      return TensorView(v.data(), kv_shape, type, Device::kCpu);
    };
    ops::AttentionSequence cpu{view(q[s], {1, width}), c.q_pos[s], view(cpu_k[s], kv_shape),
                               view(cpu_v[s], kv_shape), view(cpu_out[s], {1, width})};
    ops::AttentionSequence ref{view(q[s], {1, width}), c.q_pos[s], half(ref_k[s]), half(ref_v[s]),
                               view(ref_out[s], {1, width})};
    if (c.self) {
      cpu.new_k = view(cpu_new_k[s], {1, width});
      cpu.new_v = view(cpu_new_v[s], {1, width});
      ref.new_k = view(new_k[s], {1, width});  // unrounded: the twin rounds as it stores
      ref.new_v = view(new_v[s], {1, width});
    }
    cpu_seqs.push_back(cpu);
    ref_seqs.push_back(ref);
  }
  const int64_t max_keys = *std::max_element(c.k_rows.begin(), c.k_rows.end());
  const Tensor workspace = ops::attention_workspace(Device::kCpu, max_keys);
  ops::AttentionArgs args{cpu_seqs.data(), seqs, c.heads, c.d, nullptr, c.self, workspace};
  if (c.self) args.bias = &bias;
  ops::decode_attention(args);
  args.seqs = ref_seqs.data();
  cuda::reference::decode_attention(args);
  for (int64_t s = 0; s < seqs; ++s) {
    SCOPED_TRACE("sequence " + std::to_string(s));
    for (size_t i = 0; i < cpu_out[s].size(); ++i) {
      ASSERT_NEAR(ref_out[s][i], cpu_out[s][i], 1e-5f * std::max(1.0f, std::abs(cpu_out[s][i])))
          << "out [" << i << "]";
    }
    EXPECT_EQ(ref_k[s], bits(cpu_k[s])) << "the cache after the append";
    EXPECT_EQ(ref_v[s], bits(cpu_v[s])) << "the cache after the append";
  }
}

TEST(HalfKvCache, TheFusedKernelsTwinOverAHalfCacheIsTheCpuBackendOverTheSameValues) {
  for (DataType type : {DataType::kBF16, DataType::kF16}) {
    SCOPED_TRACE(std::string(data_type_name(type)));
    // Head sizes that split the block's values into 16, 2 and 1 parts over 128 threads.
    for (const int64_t d : {int64_t{8}, int64_t{64}, int64_t{200}}) {
      SCOPED_TRACE("head_dim " + std::to_string(d));
      check_half_cache(type, {.heads = 3, .d = d, .q_pos = {0, 6, 39}, .k_rows = {1, 7, 40}}, 70);
      check_half_cache(type,
                       {.heads = 2, .d = d, .q_pos = {0, 0}, .k_rows = {5, 33}, .self = false}, 80);
    }
  }
}

TEST(HalfKvCache, TheCpuKeepsAnF32CacheAndRefusesAHalfOne) {
  for (ComputeType t : {ComputeType::kFloat32, ComputeType::kBFloat16, ComputeType::kFloat16})
    EXPECT_EQ(ops::kv_cache_type(Device::kCpu, t), DataType::kF32);
  const int64_t width = 16;
  std::vector<float> q = random_values(width, 1), out(width);
  std::vector<uint16_t> k(2 * width), v(2 * width);
  const ops::AttentionSequence seq{
      view(q, {1, width}), 0, TensorView(k.data(), {2, width}, DataType::kBF16, Device::kCpu),
      TensorView(v.data(), {2, width}, DataType::kBF16, Device::kCpu), view(out, {1, width})};
  const Tensor workspace = ops::attention_workspace(Device::kCpu, 2);
  const ops::AttentionArgs args{&seq, 1, 2, 8, nullptr, false, workspace};
  try {
    ops::decode_attention(args);
    ADD_FAILURE() << "a bf16 cache on the CPU was accepted";
  } catch (const EngineError& e) {
    EXPECT_NE(std::string(e.what()).find("k is bf16, not f32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::attention(args), EngineError) << "the unfused op reads f32 only";
  std::vector<float> x = random_values(width, 2), y(width);
  ops::convert(view(x, {width}), view(y, {width}));
  EXPECT_EQ(y, x);
  EXPECT_THROW(
      ops::convert(view(x, {width}), TensorView(k.data(), {width}, DataType::kBF16, Device::kCpu)),
      EngineError);
}

TEST(HalfKvCache, AHalfCacheHasHalfTheBytesAndADecoderOnTheCpuRefusesIt) {
  const auto model = T5Model::load(test::data_dir() + "/t5-tiny-random", {.threads = 1});
  const KvCacheOptions options{
      .num_slots = 2, .max_beams = 1, .max_target_len = 8, .max_source_len = 8};
  const KvCache f32(model->config(), options),
      bf16(model->config(), options, Device::kCpu, DataType::kBF16);
  EXPECT_EQ(bf16.dtype(), DataType::kBF16);
  EXPECT_EQ(2 * bf16.bytes(), f32.bytes());
  EXPECT_THROW(KvCache(model->config(), options, Device::kCpu, DataType::kI32), EngineError);
  KvCache cache(model->config(), options, Device::kCpu, DataType::kBF16);
  EXPECT_THROW(Decoder(model, cache), EngineError);
}

// --- On a GPU (skipped without one) ---

Tensor on_gpu(const void* data, std::vector<int64_t> shape, DataType type) {
  Tensor t = Tensor::empty(shape, Device::kCuda, type);
  ops::copy_to(t, TensorView(const_cast<void*>(data), shape, type, Device::kCpu));
  return t;
}

template <typename T>
std::vector<T> from_gpu(const TensorView& t) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  ops::copy_to(TensorView(out.data(), t.shape(), t.dtype(), Device::kCpu), t);
  return out;
}

TEST(HalfKvCacheGpu, TheKernelOverAHalfCacheIsItsHostTwin) {
  SEQPIPE_SKIP_WITHOUT(Device::kCuda);
  EXPECT_EQ(ops::kv_cache_type(Device::kCuda, ComputeType::kBFloat16), DataType::kBF16);
  EXPECT_EQ(ops::kv_cache_type(Device::kCuda, ComputeType::kFloat16), DataType::kF16);
  EXPECT_EQ(ops::kv_cache_type(Device::kCuda, ComputeType::kFloat32), DataType::kF32);
  const int64_t heads = 4, d = 64, width = heads * d, keys = 37, pos = 36;
  for (DataType type : {DataType::kBF16, DataType::kF16}) {
    SCOPED_TRACE(std::string(data_type_name(type)));
    std::vector<float> q = random_values(width, 5), nk = random_values(width, 6, 2.0f),
                       nv = random_values(width, 7), ref_out(width);
    std::vector<uint16_t> k, v;
    for (float x : random_values(keys * width, 8, 2.0f)) k.push_back(cache_bits(x, type));
    for (float x : random_values(keys * width, 9)) v.push_back(cache_bits(x, type));
    const Tensor qd = on_gpu(q.data(), {1, width}, DataType::kF32),
                 nkd = on_gpu(nk.data(), {1, width}, DataType::kF32),
                 nvd = on_gpu(nv.data(), {1, width}, DataType::kF32),
                 kd = on_gpu(k.data(), {keys, width}, type),
                 vd = on_gpu(v.data(), {keys, width}, type),
                 out = Tensor::empty({1, width}, Device::kCuda);
    const ops::AttentionSequence gpu{qd, pos, kd, vd, out, nkd, nvd};
    const Tensor workspace = ops::attention_workspace(Device::kCuda, keys);
    ops::AttentionArgs args{&gpu, 1, heads, d, nullptr, true, workspace};
    ops::decode_attention(args);
    const ops::AttentionSequence host{view(q, {1, width}),
                                      pos,
                                      TensorView(k.data(), {keys, width}, type, Device::kCpu),
                                      TensorView(v.data(), {keys, width}, type, Device::kCpu),
                                      view(ref_out, {1, width}),
                                      view(nk, {1, width}),
                                      view(nv, {1, width})};
    args.seqs = &host;
    cuda::reference::decode_attention(args);
    const std::vector<float> got = from_gpu<float>(out);
    for (int64_t i = 0; i < width; ++i)
      ASSERT_NEAR(got[i], ref_out[i], 1e-5f * std::max(1.0f, std::abs(ref_out[i]))) << i;
    EXPECT_EQ(from_gpu<uint16_t>(kd), k) << "the appended key, rounded as the twin rounds it";
    EXPECT_EQ(from_gpu<uint16_t>(vd), v);
    std::vector<float> x = random_values(width, 10, 1e5f);
    const Tensor xd = on_gpu(x.data(), {1, width}, DataType::kF32),
                 yd = Tensor::empty({1, width}, Device::kCuda, type);
    ops::convert(xd, yd);
    std::vector<uint16_t> want;
    for (float e : x) want.push_back(cache_bits(e, type));
    EXPECT_EQ(from_gpu<uint16_t>(yd), want) << "convert rounds as the cache stores";
  }
}

// A bf16 model's decoder on a bf16 cache against the same model on an f32 cache: the same
// greedy choices and logits within bf16's rounding of K and V.
TEST(HalfKvCacheGpu, ADecoderOnAHalfCacheFollowsOneOnAnF32Cache) {
  SEQPIPE_SKIP_WITHOUT(Device::kCuda);
  const auto model = T5Model::load(
      test::data_dir() + "/t5-tiny-random",
      {.threads = 1, .device = Device::kCuda, .compute_type = ComputeType::kBFloat16});
  const KvCacheOptions options{
      .num_slots = 2, .max_beams = 1, .max_target_len = 12, .max_source_len = 16};
  KvCache f32(model->config(), options, Device::kCuda),
      bf16(model->config(), options, Device::kCuda, DataType::kBF16);
  Decoder on_f32(model, f32), on_bf16(model, bf16);
  Encoder encoder(model);
  const EncoderOutput enc = encoder.encode({{5, 9, 17, 3, 1}, {40, 2, 1}});
  const int slots[2] = {*f32.acquire(), *f32.acquire()};
  ASSERT_EQ(*bf16.acquire(), slots[0]);
  ASSERT_EQ(*bf16.acquire(), slots[1]);
  on_f32.start(enc, slots);
  on_bf16.start(enc, slots);
  for (int i = 0; i < 2; ++i) {  // the one GEMM's K/V, rounded, in each slot's rows
    for (int64_t l = 0; l < model->config().num_decoder_layers; ++l) {
      const int64_t rows = enc.length(static_cast<size_t>(i));
      for (const bool key : {true, false}) {
        const auto pick = [&](const KvCache& c) {
          return (key ? c.cross_k(slots[i], l) : c.cross_v(slots[i], l)).rows(0, rows);
        };
        std::vector<uint16_t> want;
        for (float x : from_gpu<float>(pick(f32))) want.push_back(cache_bits(x, DataType::kBF16));
        ASSERT_EQ(from_gpu<uint16_t>(pick(bf16)), want) << "slot " << i << " layer " << l;
      }
    }
  }
  int tokens[2] = {0, 0};
  for (int step = 0; step < 8; ++step) {
    const std::vector<float> a = from_gpu<float>(on_f32.step(slots, tokens, 2)),
                             b = from_gpu<float>(on_bf16.step(slots, tokens, 2));
    const int64_t vocab = model->config().vocab_size;
    for (int r = 0; r < 2; ++r) {
      const auto row_a = a.begin() + r * vocab, row_b = b.begin() + r * vocab;
      for (int64_t i = 0; i < vocab; ++i)
        ASSERT_NEAR(row_b[i], row_a[i], 0.05f * std::max(1.0f, std::abs(row_a[i])))
            << "step " << step << " row " << r << " token " << i;
      tokens[r] = static_cast<int>(std::max_element(row_a, row_a + vocab) - row_a);
    }
  }
}

}  // namespace
}  // namespace seqpipe::engine
