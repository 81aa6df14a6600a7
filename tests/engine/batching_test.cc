// Batching must not change results: a padded batch equals each sequence alone, and a sequence
// that joins a decoder batch already running (continuous batching) gets the output it gets alone.
// On every device (the GPU's instances skip, with the reason, where there is none).
#include <gtest/gtest.h>

#include "ops.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/engine/encoder.h"
#include "seqpipe/engine/error.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

const std::vector<std::vector<int>> kInputs = {
    {467, 413, 398, 67, 58, 36, 434, 17, 1},
    {387, 191, 1},
    {455, 453, 6, 324, 65, 164, 458, 110, 344, 134, 410, 434, 362, 26, 91, 464, 1},
    {12, 99, 250, 7, 1},
};

class BatchingTest : public ::testing::TestWithParam<test::DeviceCase> {
 protected:
  void SetUp() override {
    const test::DeviceCase& device = GetParam();
    SEQPIPE_SKIP_WITHOUT(device.device);
    model_ =
        T5Model::load(test::data_dir() + "/t5v11-tiny-random",
                      {.threads = 1, .device = device.device, .cuda_graphs = device.cuda_graphs});
  }
  std::shared_ptr<const T5Model> model_;
};

TEST_P(BatchingTest, EncoderBatchEqualsEncoderAlone) {
  Encoder encoder(model_);
  EncoderOutput batch = encoder.encode(kInputs);
  const int64_t d = model_->config().d_model;
  for (size_t i = 0; i < kInputs.size(); ++i) {
    EncoderOutput alone = encoder.encode({kInputs[i]});
    ASSERT_EQ(batch.length(i), alone.length(0));
    std::vector<float> in_batch(static_cast<size_t>(alone.length(0) * d)), by_itself(in_batch);
    batch.copy_sequence(i, in_batch.data());
    alone.copy_sequence(0, by_itself.data());
    for (size_t j = 0; j < in_batch.size(); ++j) {
      ASSERT_NEAR(in_batch[j], by_itself[j], 1e-5) << "sequence " << i << " value " << j;
    }
  }
}

TEST_P(BatchingTest, GenerateBatchEqualsGenerateAlone) {
  for (int beams : {1, 4}) {
    DecodingOptions o{.max_new_tokens = 12, .num_beams = beams, .return_scores = true};
    auto batch = generate(model_, kInputs, o);
    for (size_t i = 0; i < kInputs.size(); ++i) {
      auto alone = generate(model_, {kInputs[i]}, o);
      EXPECT_EQ(batch[i].ids, alone[0].ids) << "beams " << beams << " sequence " << i;
      EXPECT_NEAR(batch[i].score, alone[0].score, 1e-5);
    }
  }
}

// Runs `first` for `steps` decoder steps, then adds `second` to the running batch.
std::vector<GenerationResult> join_mid_run(std::shared_ptr<const T5Model> model,
                                           const DecodingOptions& o1, const DecodingOptions& o2,
                                           int steps) {
  Encoder encoder(model);
  GeneratorOptions go;
  go.cache = {.num_slots = 8, .max_beams = 4, .max_target_len = 32, .max_source_len = 32};
  Generator gen(model, go);
  EncoderOutput a = encoder.encode({kInputs[0]});
  EncoderOutput b = encoder.encode({kInputs[2]});
  std::vector<Generator::Finished> finished;
  const uint64_t ha = gen.add(a, 0, o1);
  for (int i = 0; i < steps; ++i) gen.step(finished);
  EXPECT_TRUE(finished.empty());
  const uint64_t hb = gen.add(b, 0, o2);
  EXPECT_EQ(gen.active(), 2);
  while (gen.active() > 0) gen.step(finished);
  EXPECT_EQ(gen.free_slots(), 8) << "every slot is returned to the pool";
  std::vector<GenerationResult> out(2);
  for (auto& f : finished) out[f.handle == ha ? 0 : f.handle == hb ? 1 : 99] = f.result;
  return out;
}

TEST_P(BatchingTest, SequenceJoiningARunningBatchMatchesDecodingAlone) {
  const DecodingOptions greedy{.max_new_tokens = 12, .min_new_tokens = 12};
  const DecodingOptions beam{.max_new_tokens = 12, .num_beams = 4};
  for (auto [o1, o2] : {std::pair{greedy, greedy}, std::pair{greedy, beam}, std::pair{beam, greedy},
                        std::pair{beam, beam}}) {
    auto joined = join_mid_run(model_, o1, o2, 5);
    EXPECT_EQ(joined[0].ids, generate(model_, {kInputs[0]}, o1)[0].ids);
    EXPECT_EQ(joined[1].ids, generate(model_, {kInputs[2]}, o2)[0].ids);
  }
}

TEST_P(BatchingTest, BatchedAddWithMixedOptionsMatchesDecodingAlone) {
  Encoder encoder(model_);
  GeneratorOptions go;
  go.cache = {.num_slots = 10, .max_beams = 4, .max_target_len = 16, .max_source_len = 32};
  Generator gen(model_, go);
  const std::vector<DecodingOptions> options = {{.max_new_tokens = 10},
                                                {.max_new_tokens = 12, .num_beams = 4},
                                                {.max_new_tokens = 8, .min_new_tokens = 8},
                                                {.max_new_tokens = 12, .num_beams = 3}};
  EncoderOutput enc = encoder.encode(kInputs);
  const auto handles = gen.add(enc, options);
  ASSERT_EQ(handles.size(), 4u);
  EXPECT_EQ(gen.free_slots(), 10 - 1 - 4 - 1 - 3);
  std::vector<Generator::Finished> finished;
  while (gen.active() > 0) gen.step(finished);
  ASSERT_EQ(finished.size(), 4u);
  for (const auto& f : finished) {
    const size_t i =
        static_cast<size_t>(std::find(handles.begin(), handles.end(), f.handle) - handles.begin());
    ASSERT_LT(i, 4u);
    EXPECT_EQ(f.result.ids, generate(model_, {kInputs[i]}, options[i])[0].ids) << "sequence " << i;
  }
  // All or none: a batch that does not fit takes no slot.
  const std::vector<DecodingOptions> too_many(4,
                                              DecodingOptions{.max_new_tokens = 4, .num_beams = 3});
  EXPECT_THROW(gen.add(enc, too_many), EngineError);
  EXPECT_EQ(gen.free_slots(), 10);
  EXPECT_THROW(gen.add(enc, std::vector<DecodingOptions>(2)), EngineError);  // count mismatch
}

TEST_P(BatchingTest, SlotsAreBoundedAndCancelFreesThem) {
  Encoder encoder(model_);
  GeneratorOptions go;
  go.cache = {.num_slots = 5, .max_beams = 4, .max_target_len = 16, .max_source_len = 32};
  Generator gen(model_, go);
  EncoderOutput enc = encoder.encode({kInputs[0]});
  const DecodingOptions beam{.max_new_tokens = 10, .num_beams = 4};
  const uint64_t h = gen.add(enc, 0, beam);
  EXPECT_EQ(gen.free_slots(), 1);
  EXPECT_FALSE(gen.can_admit(beam));
  EXPECT_THROW(gen.add(enc, 0, beam), EngineError);
  std::vector<Generator::Finished> finished;
  gen.step(finished);
  EXPECT_TRUE(gen.cancel(h));
  EXPECT_FALSE(gen.cancel(h));
  EXPECT_EQ(gen.free_slots(), 5);
  EXPECT_EQ(gen.active(), 0);
}

TEST_P(BatchingTest, InvalidRequestsAreErrorsNotCrashes) {
  Encoder encoder(model_);
  EXPECT_THROW(encoder.encode({{}}), EngineError);
  EXPECT_THROW(encoder.encode({{5, 100000}}), EngineError);
  EXPECT_THROW(encoder.encode({{-1}}), EngineError);
  GeneratorOptions go;
  go.cache = {.num_slots = 2, .max_beams = 2, .max_target_len = 8, .max_source_len = 4};
  Generator gen(model_, go);
  EncoderOutput enc = encoder.encode({kInputs[0]});  // 9 tokens > max_source_len 4
  EXPECT_THROW(gen.add(enc, 0, {.max_new_tokens = 4}), EngineError);
  EncoderOutput small = encoder.encode({kInputs[1]});
  EXPECT_THROW(gen.add(small, 0, {.max_new_tokens = 8}), EngineError);  // > max_target_len - 1
  EXPECT_THROW(gen.add(small, 0, {.max_new_tokens = 4, .num_beams = 3}), EngineError);
  EXPECT_EQ(gen.free_slots(), 2) << "a refused request holds no slot";
}

TEST_P(BatchingTest, MisuseOfSlotsIsAnErrorNotCorruption) {
  KvCache cache(model_->config(),
                {.num_slots = 3, .max_beams = 1, .max_target_len = 8, .max_source_len = 16},
                model_->device());
  EXPECT_THROW(cache.release(0), EngineError) << "not held";
  const int a = *cache.acquire();
  cache.release(a);
  EXPECT_THROW(cache.release(a), EngineError)
      << "released twice would hand one slot to two sequences";
  EXPECT_EQ(cache.free_slots(), 3);
  EXPECT_THROW(cache.set_length(a, -1), EngineError);
  EXPECT_THROW(cache.set_length(a, 9), EngineError);
  EXPECT_THROW(cache.set_source_length(a, 17), EngineError);

  Decoder decoder(model_, cache);
  Encoder encoder(model_);
  EncoderOutput enc = encoder.encode({kInputs[1]});
  const int s0 = *cache.acquire();
  const int s1 = *cache.acquire();
  const int free_slot = (s0 != 0 && s1 != 0) ? 0 : (s0 != 1 && s1 != 1) ? 1 : 2;
  const int tokens[2] = {0, 0};
  EXPECT_THROW(decoder.start(free_slot, enc.sequence(0)), EngineError) << "slot not held";
  decoder.start(s0, enc.sequence(0));
  const int not_started[1] = {s1};
  EXPECT_THROW(decoder.step(not_started, tokens, 1), EngineError);
  const int twice[2] = {s0, s0};
  EXPECT_THROW(decoder.step(twice, tokens, 2), EngineError);
  const int unheld[1] = {free_slot};
  EXPECT_THROW(decoder.step(unheld, tokens, 1), EngineError);
  const int out_of_range[1] = {7};
  EXPECT_THROW(decoder.step(out_of_range, tokens, 1), EngineError);
  const int good[1] = {s0};
  EXPECT_NO_THROW(decoder.step(good, tokens, 1));
}

std::vector<float> to_host(const TensorView& t) {
  Tensor out = Tensor::empty(t.shape());
  ops::copy_to(out, t);
  return {out.data(), out.data() + out.numel()};
}

// Every layer's cross K/V is one GEMM over a batch's encoder rows, in groups of sequences when
// the batch has more rows than one GEMM takes (1,130 rows here: two groups): each slot's cache
// then holds what starting its sequence alone puts there.
TEST_P(BatchingTest, BatchedStartFillsEverySlotAsStartingItAlone) {
  const KvCacheOptions options{
      .num_slots = 3, .max_beams = 1, .max_target_len = 4, .max_source_len = 600};
  KvCache batched(model_->config(), options, model_->device()),
      alone(model_->config(), options, model_->device());
  Decoder batched_decoder(model_, batched), alone_decoder(model_, alone);
  const int64_t d = model_->config().d_model, lengths[3] = {500, 600, 30};
  EncoderOutput enc;
  enc.offsets = {0, 500, 1100, 1130};
  const std::vector<float> values = test::random_values(static_cast<size_t>(1130 * d), 17);
  enc.hidden = Tensor::empty({1130, d}, model_->device());
  ops::copy_to(enc.hidden, TensorView(const_cast<float*>(values.data()), {1130, d}, DataType::kF32,
                                      Device::kCpu));
  int slots[3];
  for (int& s : slots) s = *batched.acquire();
  batched_decoder.start(enc, slots);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(*alone.acquire(), slots[i]);  // both caches hand out slots in the same order
    alone_decoder.start(slots[i], enc.sequence(i));
    ASSERT_EQ(batched.source_length(slots[i]), lengths[i]);
    for (int64_t l = 0; l < model_->config().num_decoder_layers; ++l) {
      const std::vector<float> k = to_host(batched.cross_k(slots[i], l).rows(0, lengths[i])),
                               want_k = to_host(alone.cross_k(slots[i], l).rows(0, lengths[i])),
                               v = to_host(batched.cross_v(slots[i], l).rows(0, lengths[i])),
                               want_v = to_host(alone.cross_v(slots[i], l).rows(0, lengths[i]));
      for (size_t j = 0; j < k.size(); ++j) {
        ASSERT_NEAR(k[j], want_k[j], 1e-5) << "sequence " << i << " layer " << l << " K " << j;
        ASSERT_NEAR(v[j], want_v[j], 1e-5) << "sequence " << i << " layer " << l << " V " << j;
      }
    }
  }
}

TEST_P(BatchingTest, MalformedEncoderOutputIsRefusedWithoutHoldingSlots) {
  Encoder encoder(model_);
  GeneratorOptions go;
  go.cache = {.num_slots = 4, .max_beams = 2, .max_target_len = 8, .max_source_len = 32};
  Generator gen(model_, go);
  EncoderOutput enc = encoder.encode({kInputs[0], kInputs[1]});
  EncoderOutput bad = enc;
  bad.offsets = {0, 5, 5};  // an empty sequence
  EXPECT_THROW(gen.add(bad, 1, {.max_new_tokens = 4}), EngineError);
  bad.offsets = {0, 5, 400};  // past the hidden rows
  EXPECT_THROW(gen.add(bad, std::vector<DecodingOptions>(2, DecodingOptions{.max_new_tokens = 4})),
               EngineError);
  EXPECT_EQ(gen.free_slots(), 4);
  EXPECT_EQ(gen.active(), 0);
}

INSTANTIATE_TEST_SUITE_P(Devices, BatchingTest, ::testing::ValuesIn(test::kDeviceCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(DecodingOptionsTest, ValidateNamesTheField) {
  auto message = [](const DecodingOptions& o) {
    try {
      o.validate(64);
    } catch (const EngineError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({.max_new_tokens = 0}).find("max_new_tokens"), std::string::npos);
  EXPECT_NE(message({.max_new_tokens = 64}).find("max_new_tokens"), std::string::npos);
  EXPECT_NE(message({.max_new_tokens = 5, .min_new_tokens = 6}).find("min_new_tokens"),
            std::string::npos);
  EXPECT_NE(message({.num_beams = 0}).find("num_beams"), std::string::npos);
  EXPECT_NE(message({.num_beams = 17}).find("num_beams"), std::string::npos);
  EXPECT_NE(message({.length_penalty = NAN}).find("length_penalty"), std::string::npos);
  EXPECT_EQ(message({}), "no error");
}

}  // namespace
}  // namespace seqpipe::engine

namespace seqpipe::engine {
namespace {

TEST(NumReturnSequences, BeamReturnsItsOtherHypothesesBestFirstAndTheSameBest) {
  auto model = T5Model::load(test::data_dir() + "/t5v11-tiny-random", {.threads = 1});
  const std::vector<std::vector<int>> input = {{467, 413, 398, 67, 58, 36, 434, 17, 1}};
  DecodingOptions one{.max_new_tokens = 8, .num_beams = 4, .length_penalty = 1.0f};
  DecodingOptions four = one;
  four.num_return_sequences = 4;
  const GenerationResult a = generate(model, input, one)[0];
  const GenerationResult b = generate(model, input, four)[0];
  EXPECT_EQ(b.ids, a.ids);  // the best is unchanged
  EXPECT_EQ(b.score, a.score);
  EXPECT_TRUE(a.alternatives.empty());
  ASSERT_EQ(b.alternatives.size(), 3u);
  for (const auto& alt : b.alternatives) {
    EXPECT_NE(alt, b.ids);
    EXPECT_EQ(alt.front(), 0);  // the decoder start token, as ids
  }
  EXPECT_NE(b.alternatives[0], b.alternatives[1]);
  // Each alternative's sequences_score, best first, none above the best's.
  ASSERT_EQ(b.alternative_scores.size(), 3u);
  EXPECT_LE(b.alternative_scores[0], b.score);
  EXPECT_GE(b.alternative_scores[0], b.alternative_scores[1]);
  EXPECT_GE(b.alternative_scores[1], b.alternative_scores[2]);
  EXPECT_TRUE(a.alternative_scores.empty());
  four.num_return_sequences = 5;  // more than num_beams
  EXPECT_THROW(four.validate(64), EngineError);
}

}  // namespace
}  // namespace seqpipe::engine
