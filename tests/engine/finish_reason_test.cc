// Why a sequence ended (GenerationResult::finish_reason): eos, max_new_tokens or a stop
// sequence, for greedy search, sampling and beam search.
#include <gtest/gtest.h>

#include "seqpipe/engine/decoding.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

const std::vector<std::vector<int>> kInputs = {
    {467, 413, 398, 67, 58, 36, 434, 17, 1}, {387, 191, 1}, {12, 99, 250, 7, 1}};

class FinishReasonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = T5Model::load(test::data_dir() + "/t5v11-tiny-random", {.threads = 1});
  }
  // The reason the ids show: eos when they end with it, else the length ran out.
  FinishReason by_ids(const GenerationResult& r) const {
    return r.ids.back() == model_->config().eos_token_id ? FinishReason::kEos
                                                         : FinishReason::kLength;
  }
  std::shared_ptr<const T5Model> model_;
};

TEST_F(FinishReasonTest, MinTokensUpToTheLimitEndByLength) {
  for (int beams : {1, 3}) {
    for (const auto& r : generate(model_, kInputs,
                                  {.max_new_tokens = 3, .min_new_tokens = 3, .num_beams = beams})) {
      EXPECT_EQ(r.ids.size(), 4u) << "beams " << beams;
      EXPECT_EQ(r.finish_reason, FinishReason::kLength) << "beams " << beams;
    }
  }
}

TEST_F(FinishReasonTest, EosOrLengthAsTheIdsShow) {
  for (const DecodingOptions& o :
       {DecodingOptions{.max_new_tokens = 12},
        DecodingOptions{.max_new_tokens = 12, .num_beams = 4},
        DecodingOptions{.max_new_tokens = 12, .do_sample = true, .seed = 7}}) {
    for (const auto& r : generate(model_, kInputs, o)) EXPECT_EQ(r.finish_reason, by_ids(r));
  }
}

TEST_F(FinishReasonTest, StopIdsEndByStop) {
  // The first token each input gets alone is its stop sequence: decoding ends right there.
  const auto free = generate(model_, kInputs, {.max_new_tokens = 8, .min_new_tokens = 1});
  for (size_t i = 0; i < kInputs.size(); ++i) {
    const DecodingOptions o{
        .max_new_tokens = 8, .min_new_tokens = 1, .stop_ids = {{free[i].ids[1]}}};
    const auto r = generate(model_, {kInputs[i]}, o)[0];
    EXPECT_EQ(r.ids.size(), 2u);
    EXPECT_EQ(r.finish_reason, FinishReason::kStop);
  }
}

}  // namespace
}  // namespace seqpipe::engine
