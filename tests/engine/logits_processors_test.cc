// The logits processors against HF transformers' own (generation/logits_process.py): the expected
// rows are what a torch port of HF's RepetitionPenaltyLogitsProcessor,
// NoRepeatNGramLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper
// returns for the same inputs (torch 1.13, float32; tests/engine/hf_logits_processors_port.py
// prints them). Then the searches: the processors reach the engine's logits in HF's order,
// sampling is reproducible per sequence and draws from the warped softmax.
#include "seqpipe/engine/logits_processors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "seqpipe/engine/decoder.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/engine/encoder.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/model.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> row() {
  return {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f, 0.0f, -0.5f};
}

void expect_row(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]))
      EXPECT_EQ(got[i], want[i]) << "token " << i;
    else
      EXPECT_NEAR(got[i], want[i], 1e-6) << "token " << i;
  }
}

TEST(LogitsProcessors, RepetitionPenaltyPenalisesEachSeenTokenOnce) {
  std::vector<float> s = row(), gathered(5);
  const std::vector<int> history = {0, 3, 1, 3, 5};  // 3 twice: penalised once
  logits::repetition_penalty(s, history, 1.5f, gathered);
  expect_row(s, {2.0f / 1.5f, -1.5f, 0.5f, 2.0f, -2.0f, 1.0f / 1.5f, 0.0f, -0.5f});
}

TEST(LogitsProcessors, NoRepeatNgramBansWhatWouldCompleteASeenNgram) {
  const std::vector<int> history = {0, 3, 1, 3, 5, 3, 1};
  std::vector<float> s = row();
  logits::no_repeat_ngram(s, history, 2);  // (1, 3) was seen: 3 after 1 is banned
  expect_row(s, {2.0f, -1.0f, 0.5f, -kInf, -2.0f, 1.0f, 0.0f, -0.5f});
  s = row();
  logits::no_repeat_ngram(s, history, 3);  // (3, 1, 3) was seen
  expect_row(s, {2.0f, -1.0f, 0.5f, -kInf, -2.0f, 1.0f, 0.0f, -0.5f});
  s = row();
  logits::no_repeat_ngram(s, history, 1);  // every token seen
  expect_row(s, {-kInf, -kInf, 0.5f, -kInf, -2.0f, -kInf, 0.0f, -0.5f});
  s = row();
  logits::no_repeat_ngram(s, std::vector<int>{0, 3}, 4);  // shorter than an n-gram's prefix
  expect_row(s, row());
}

TEST(LogitsProcessors, TemperatureDividesTheScores) {
  std::vector<float> s = row();
  logits::temperature(s, 0.5f);
  expect_row(s, {4.0f, -2.0f, 1.0f, 6.0f, -4.0f, 2.0f, 0.0f, -1.0f});
}

TEST(LogitsProcessors, TopKKeepsTheKLargestTiesIncludedAndAtLeastMinTokens) {
  std::vector<float> s = row(), scratch(8);
  logits::top_k(s, 3, 1, scratch);
  expect_row(s, {2.0f, -kInf, -kInf, 3.0f, -kInf, 1.0f, -kInf, -kInf});
  s = row();
  logits::top_k(s, 3, 5, scratch);
  expect_row(s, {2.0f, -kInf, 0.5f, 3.0f, -kInf, 1.0f, 0.0f, -kInf});
  std::vector<float> ties = {1.0f, 1.0f, 1.0f, 0.5f};
  logits::top_k(ties, 2, 1, std::span<float>(scratch).first(4));
  expect_row(ties, {1.0f, 1.0f, 1.0f, -kInf});
  s = row();
  logits::top_k(s, 100, 1, scratch);  // more than the vocabulary: nothing removed
  expect_row(s, row());
}

TEST(LogitsProcessors, TopPKeepsTheSmallestSetAboveTopPAndAtLeastMinTokens) {
  std::vector<int> order(8);
  std::vector<float> s = row();
  logits::top_p(s, 0.8f, 1, order);  // 0.59 + 0.22 >= 0.8
  expect_row(s, {2.0f, -kInf, -kInf, 3.0f, -kInf, -kInf, -kInf, -kInf});
  s = row();
  logits::top_p(s, 0.5f, 1, order);
  expect_row(s, {-kInf, -kInf, -kInf, 3.0f, -kInf, -kInf, -kInf, -kInf});
  s = row();
  logits::top_p(s, 0.01f, 2, order);
  expect_row(s, {2.0f, -kInf, -kInf, 3.0f, -kInf, -kInf, -kInf, -kInf});
  s = row();
  logits::top_p(s, 1.0f, 1, order);
  expect_row(s, row());
}

// repetition_penalty 1.3 -> no_repeat_ngram 2 -> temperature 0.7 -> top_k 4 -> top_p 0.9, then
// draws: the frequencies follow the warped softmax (torch: 0.2307, 0.6924, 0.0769 on 0, 3, 5).
TEST(LogitsProcessors, ChainInHfOrderThenDrawsFollowTheWarpedDistribution) {
  std::vector<float> s = row(), gathered(5), scratch(8);
  std::vector<int> order(8);
  const std::vector<int> history = {0, 3, 1, 3, 5};
  logits::repetition_penalty(s, history, 1.3f, gathered);
  logits::no_repeat_ngram(s, history, 2);
  logits::temperature(s, 0.7f);
  logits::top_k(s, 4, 1, scratch);
  logits::top_p(s, 0.9f, 1, order);
  expect_row(s, {2.1978023f, -kInf, -kInf, 3.2967033f, -kInf, 1.0989012f, -kInf, -kInf});
  std::mt19937_64 rng(7);
  std::map<int, int> counts;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) ++counts[logits::sample(s, rng)];
  EXPECT_EQ(counts.size(), 3u);  // never a filtered token
  EXPECT_NEAR(counts[0] / double(kDraws), 0.23072824, 0.01);
  EXPECT_NEAR(counts[3] / double(kDraws), 0.69238460, 0.01);
  EXPECT_NEAR(counts[5] / double(kDraws), 0.07688721, 0.01);
  EXPECT_NEAR(logits::log_softmax_at(s, 3), std::log(0.69238460), 1e-5);
}

class SearchProcessors : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = T5Model::load(test::data_dir() + "/t5v11-tiny-random", {.threads = 1});
  }
  std::shared_ptr<const T5Model> model_;
  const std::vector<int> input_ = {467, 413, 398, 67, 58, 36, 434, 17, 1};
};

// Greedy with the penalties equals the argmax of the processed logits, step by step, with the
// decoder fed the same tokens (teacher forcing), and no bigram comes twice.
TEST_F(SearchProcessors, GreedyWithPenaltiesIsTheArgmaxOfTheProcessedLogits) {
  DecodingOptions o{.max_new_tokens = 16, .min_new_tokens = 16};
  o.repetition_penalty = 1.7f;
  o.no_repeat_ngram_size = 2;
  const std::vector<int> ids = generate(model_, {input_}, o)[0].ids;
  ASSERT_EQ(ids.size(), 17u);
  const std::vector<int> plain =
      generate(model_, {input_}, {.max_new_tokens = 16, .min_new_tokens = 16})[0].ids;
  EXPECT_NE(ids, plain);  // the penalties changed something on this model
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    for (size_t j = i + 1; j + 1 < ids.size(); ++j)
      EXPECT_FALSE(ids[i] == ids[j] && ids[i + 1] == ids[j + 1]) << "bigram at " << i << ", " << j;
  }
  Encoder encoder(model_);
  EncoderOutput enc = encoder.encode({input_});
  KvCache cache(model_->config(),
                {.num_slots = 1, .max_beams = 1, .max_target_len = 17, .max_source_len = 16});
  Decoder decoder(model_, cache);
  const int slot = *cache.acquire();
  decoder.start(slot, enc.sequence(0));
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  std::vector<float> gathered(17);
  for (size_t pos = 0; pos + 1 < ids.size(); ++pos) {
    const float* logits = decoder.step(&slot, &ids[pos], 1).row(0);
    std::vector<float> s(logits, logits + vocab);
    const std::span<const int> history(ids.data(), pos + 1);
    logits::repetition_penalty(s, history, 1.7f, gathered);
    logits::no_repeat_ngram(s, history, 2);
    s[1] = -kInf;  // min_new_tokens: eos (id 1) suppressed
    const int want = static_cast<int>(std::max_element(s.begin(), s.end()) - s.begin());
    EXPECT_EQ(ids[pos + 1], want) << "position " << pos;
  }
}

TEST_F(SearchProcessors, BeamSearchWithNoRepeatNgramRepeatsNoBigram) {
  DecodingOptions o{.max_new_tokens = 16, .min_new_tokens = 16, .num_beams = 4};
  o.no_repeat_ngram_size = 2;
  const std::vector<int> ids = generate(model_, {input_}, o)[0].ids;
  ASSERT_GE(ids.size(), 3u);
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    for (size_t j = i + 1; j + 1 < ids.size(); ++j)
      EXPECT_FALSE(ids[i] == ids[j] && ids[i + 1] == ids[j + 1]) << "bigram at " << i << ", " << j;
  }
}

// The same seed gives the same tokens alone or beside other sequences (each its own generator);
// another seed gives other tokens.
TEST_F(SearchProcessors, SamplingWithASeedIsReproducibleWhateverElseIsInTheBatch) {
  DecodingOptions o{.max_new_tokens = 12, .min_new_tokens = 12};
  o.do_sample = true;
  o.top_k = 0;
  o.temperature = 1.5f;
  o.seed = 1234;
  const auto alone = generate(model_, {input_}, o)[0].ids;
  EXPECT_EQ(generate(model_, {input_}, o)[0].ids, alone);
  const auto batch = generate(model_, {input_, {5, 6, 7, 1}, input_}, o);
  EXPECT_EQ(batch[0].ids, alone);
  EXPECT_EQ(batch[2].ids, alone);
  o.seed = 4321;
  EXPECT_NE(generate(model_, {input_}, o)[0].ids, alone);
  // Greedy's argmax is what sampling gives when top_k keeps one token.
  o.top_k = 1;
  EXPECT_EQ(generate(model_, {input_}, o)[0].ids,
            generate(model_, {input_}, {.max_new_tokens = 12, .min_new_tokens = 12})[0].ids);
}

TEST(DecodingOptionsValidation, RefusesOutOfRangeGenerationOptions) {
  auto refused = [](auto change) {
    DecodingOptions o;
    change(o);
    EXPECT_THROW(o.validate(64), EngineError);
  };
  refused([](DecodingOptions& o) { o.top_p = 0.0f; });
  refused([](DecodingOptions& o) { o.top_p = 1.5f; });
  refused([](DecodingOptions& o) { o.temperature = 0.0f; });
  refused([](DecodingOptions& o) { o.top_k = -1; });
  refused([](DecodingOptions& o) { o.repetition_penalty = 0.0f; });
  refused([](DecodingOptions& o) { o.no_repeat_ngram_size = -1; });
  refused([](DecodingOptions& o) {
    o.do_sample = true;
    o.num_beams = 2;
  });
  DecodingOptions ok;
  ok.do_sample = true;
  ok.top_p = 1.0f;
  EXPECT_NO_THROW(ok.validate(64));
}

}  // namespace
}  // namespace seqpipe::engine
