// The engine against HuggingFace transformers' own outputs for the two fixture checkpoints
// (tests/data/*/reference.json): encoder states and teacher-forced logits within 1e-4 relative,
// greedy / greedy_min11 / beam-4 ids exactly, beam sequence scores within 1e-4. In fp32 on every
// device: the GPU's instances skip, with the reason, where there is none.
#include <gtest/gtest.h>

#include <cmath>

#include "ops.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/engine/encoder.h"
#include "seqpipe/engine/model.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

using test::close;

class ReferenceTest : public ::testing::TestWithParam<std::tuple<std::string, test::DeviceCase>> {
 protected:
  void SetUp() override {
    const auto& [fixture, device] = GetParam();
    SEQPIPE_SKIP_WITHOUT(device.device);
    dir_ = test::data_dir() + "/" + fixture;
    model_ = T5Model::load(
        dir_, {.threads = 1, .device = device.device, .cuda_graphs = device.cuda_graphs});
    ref_ = test::load_json(dir_ + "/reference.json");
  }
  std::vector<int> ids(const nlohmann::json& j) { return j.get<std::vector<int>>(); }
  // A view's values in host memory, from any device.
  static std::vector<float> on_host(const TensorView& v) {
    std::vector<float> out(static_cast<size_t>(v.numel()));
    ops::copy_to(TensorView(out.data(), v.shape(), DataType::kF32, Device::kCpu), v);
    return out;
  }

  std::string dir_;
  std::shared_ptr<const T5Model> model_;
  nlohmann::json ref_;
};

TEST_P(ReferenceTest, EncoderStatesMatchHuggingFace) {
  Encoder encoder(model_);
  const int64_t d = model_->config().d_model;
  for (const auto& c : ref_["cases"]) {
    EncoderOutput out = encoder.encode({ids(c["input_ids"])});
    ASSERT_EQ(out.length(0), static_cast<int64_t>(c["input_ids"].size()));
    const auto& e = c["encoder"];
    const std::vector<float> rows = on_host(out.sequence(0));
    for (int64_t i = 0; i < out.length(0); ++i) {
      const float* row = rows.data() + i * d;
      double l2 = 0, sum = 0, dot_sin = 0;
      for (int64_t j = 0; j < d; ++j) {
        l2 += double(row[j]) * row[j];
        sum += row[j];
        dot_sin += row[j] * std::sin(double(j + 1));
      }
      l2 = std::sqrt(l2);
      const double want_l2 = e["row_l2"][i].get<double>();
      EXPECT_TRUE(close(l2, want_l2)) << "row " << i << " l2 " << l2 << " want " << want_l2;
      EXPECT_TRUE(close(sum, e["row_sum"][i].get<double>(), want_l2))
          << "row " << i << " sum " << sum;
      EXPECT_TRUE(close(dot_sin, e["row_dot_sin"][i].get<double>(), want_l2)) << "row " << i;
      for (int j = 0; j < 8; ++j) {
        EXPECT_TRUE(close(row[j], e["first8"][i][j].get<double>()))
            << "row " << i << " col " << j << " got " << row[j];
      }
    }
  }
}

TEST_P(ReferenceTest, TeacherForcedLogitsMatchHuggingFace) {
  const auto forced = ids(ref_["teacher_forced_decoder_input_ids"]);
  const int64_t vocab = model_->config().vocab_size;
  Encoder encoder(model_);
  for (const auto& c : ref_["cases"]) {
    EncoderOutput enc = encoder.encode({ids(c["input_ids"])});
    KvCache cache(model_->config(),
                  {.num_slots = 1, .max_beams = 1, .max_target_len = 16, .max_source_len = 32},
                  model_->device());
    Decoder decoder(model_, cache);
    const int slot = *cache.acquire();
    decoder.start(slot, enc.sequence(0));
    const auto& tf = c["teacher_forced"];
    for (size_t pos = 0; pos < forced.size(); ++pos) {
      const std::vector<float> row = on_host(decoder.step(&slot, &forced[pos], 1));
      const float* logits = row.data();
      int64_t argmax = 0;
      double max_v = -1e30, sum = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        if (logits[v] > logits[argmax]) argmax = v;
        max_v = std::max(max_v, double(logits[v]));
      }
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(logits[v] - max_v);
      EXPECT_EQ(argmax, tf["argmax"][pos].get<int64_t>()) << "position " << pos;
      EXPECT_TRUE(close(max_v + std::log(sum), tf["logsumexp"][pos].get<double>()))
          << "position " << pos;
      for (int j = 0; j < 8; ++j) {
        EXPECT_TRUE(close(logits[j], tf["first8"][pos][j].get<double>()))
            << "position " << pos << " logit " << j << " got " << logits[j] << " want "
            << tf["first8"][pos][j];
      }
    }
  }
}

TEST_P(ReferenceTest, GreedyIdsMatchHuggingFace) {
  for (const auto& c : ref_["cases"]) {
    auto out = generate(model_, {ids(c["input_ids"])}, {.max_new_tokens = 11});
    EXPECT_EQ(out[0].ids, ids(c["greedy"]["ids"]));
  }
}

TEST_P(ReferenceTest, GreedyMinNewTokensIdsMatchHuggingFace) {
  for (const auto& c : ref_["cases"]) {
    auto out =
        generate(model_, {ids(c["input_ids"])}, {.max_new_tokens = 11, .min_new_tokens = 11});
    EXPECT_EQ(out[0].ids, ids(c["greedy_min11"]["ids"]));
    EXPECT_EQ(out[0].ids.size(), 12u);
  }
}

TEST_P(ReferenceTest, BeamSearchIdsAndScoreMatchHuggingFace) {
  for (const auto& c : ref_["cases"]) {
    auto out = generate(model_, {ids(c["input_ids"])},
                        {.max_new_tokens = 11, .num_beams = 4, .return_scores = true});
    EXPECT_EQ(out[0].ids, ids(c["beam4"]["ids"]));
    const double want = c["beam4"]["sequences_score"].get<double>();
    EXPECT_TRUE(close(out[0].score, want)) << "score " << out[0].score << " want " << want;
    // The per-token log-probs add up to the score's numerator.
    double sum = 0;
    for (float lp : out[0].token_logprobs) sum += lp;
    EXPECT_NEAR(sum / std::pow(double(out[0].ids.size() - (out[0].ids.back() == 1 ? 1 : 0)), 1.0),
                want, 1e-3);
  }
}

// Every returned hypothesis's score is HF's sequences_score: its teacher-forced log-probs (eos
// included) summed, over its length without a final eos. The best one is also the fixture's.
TEST_P(ReferenceTest, EveryBeamHypothesisScoreIsItsSequencesScore) {
  const int64_t vocab = model_->config().vocab_size;
  const int eos = model_->config().eos_token_id;
  Encoder encoder(model_);
  for (const auto& c : ref_["cases"]) {
    auto out = generate(model_, {ids(c["input_ids"])},
                        {.max_new_tokens = 11, .num_beams = 4, .num_return_sequences = 4});
    EXPECT_EQ(out[0].ids, ids(c["beam4"]["ids"]));
    EXPECT_TRUE(close(out[0].score, c["beam4"]["sequences_score"].get<double>()));
    ASSERT_EQ(out[0].alternative_scores.size(), out[0].alternatives.size());
    std::vector<std::pair<std::vector<int>, float>> hypotheses = {{out[0].ids, out[0].score}};
    for (size_t k = 0; k < out[0].alternatives.size(); ++k)
      hypotheses.push_back({out[0].alternatives[k], out[0].alternative_scores[k]});
    EncoderOutput enc = encoder.encode({ids(c["input_ids"])});
    for (const auto& [hyp, score] : hypotheses) {
      KvCache cache(model_->config(),
                    {.num_slots = 1, .max_beams = 1, .max_target_len = 16, .max_source_len = 32},
                    model_->device());
      Decoder decoder(model_, cache);
      const int slot = *cache.acquire();
      decoder.start(slot, enc.sequence(0));
      double sum = 0;
      for (size_t pos = 0; pos + 1 < hyp.size(); ++pos) {
        const std::vector<float> row = on_host(decoder.step(&slot, &hyp[pos], 1));
        const float* logits = row.data();
        double max_v = -1e30, z = 0;
        for (int64_t v = 0; v < vocab; ++v) max_v = std::max(max_v, double(logits[v]));
        for (int64_t v = 0; v < vocab; ++v) z += std::exp(logits[v] - max_v);
        sum += logits[hyp[pos + 1]] - max_v - std::log(z);
      }
      const double length = double(hyp.size() - (hyp.back() == eos ? 1 : 0));
      EXPECT_NEAR(score, sum / length, 1e-4);
    }
  }
}

TEST_P(ReferenceTest, PaddedBatchMatchesHuggingFaceBatch) {
  const auto& b = ref_["batched"];
  std::vector<std::vector<int>> batch;
  for (size_t i = 0; i < b["input_ids"].size(); ++i) {
    std::vector<int> seq;
    for (size_t j = 0; j < b["input_ids"][i].size(); ++j) {
      if (b["attention_mask"][i][j].get<int>() == 1) seq.push_back(b["input_ids"][i][j].get<int>());
    }
    batch.push_back(seq);
  }
  // HF pads a row after its eos; compare up to and including the first eos.
  auto until_eos = [](std::vector<int> v) {
    auto it = std::find(v.begin() + 1, v.end(), 1);
    if (it != v.end()) v.erase(it + 1, v.end());
    return v;
  };
  auto greedy = generate(model_, batch, {.max_new_tokens = 11});
  auto beam = generate(model_, batch, {.max_new_tokens = 11, .num_beams = 4});
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(greedy[i].ids, until_eos(ids(b["greedy_ids"][i]))) << "row " << i;
    EXPECT_EQ(beam[i].ids, until_eos(ids(b["beam4_ids"][i]))) << "row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, ReferenceTest,
    ::testing::Combine(::testing::Values("t5-tiny-random", "t5v11-tiny-random"),
                       ::testing::ValuesIn(test::kDeviceCases)),
    [](const auto& info) {
      const bool tied = std::get<0>(info.param) == "t5-tiny-random";
      return std::string(tied ? "T5v10Tied" : "T5v11Gated") +
             (std::get<1>(info.param).device == Device::kCpu ? "" : std::get<1>(info.param).name);
    });

}  // namespace
}  // namespace seqpipe::engine
