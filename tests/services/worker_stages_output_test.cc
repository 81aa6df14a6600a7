// The postprocessor stage and what reaches a result (usage, stop strings, streamed partials,
// several sequences per text), the stages driven directly (worker_stages_fixture.h).
#include <gtest/gtest.h>

#include "worker_stages_fixture.h"

namespace seqpipe {
namespace {

TEST_F(WorkerStages, PostprocessorTextEqualsTokenizerDecodeAndExpiredItemsAreCredited) {
  postprocessor::PostprocessorStage stage(*tokenizer_,
                                          postprocessor::postprocessor_options(config_), metrics_);
  worker::WorkerOutbox out;
  const std::vector<std::string> texts = {"hello world", "teh speling", "the cat sat on the mat"};
  std::vector<stage::DecodedItem> items;
  for (uint64_t r = 0; r < texts.size(); ++r) {
    stage::DecodedItem w = decoded(r + 1);
    w.ids = {0};  // the decoder start token, as generate returns it
    for (int id : (*tokenizer_)->encode(texts[r])) w.ids.push_back(id);
    items.push_back(w);
  }
  items[2].deadline = Deadline::at_unix_us(Now::read().unix_us - 1);
  std::map<uint64_t, std::string> want;
  for (const auto& w : items)
    want[w.request] = (*tokenizer_)->decode(std::vector<int>(w.ids.begin(), w.ids.end()));
  stage.handle(stage::Postprocess{items}, out);
  std::map<uint64_t, std::string> got;
  for (const auto& [gw, m] : out.pushes) {
    for (const auto& i : as<stage::Result>(m).items) got[i.request] = i.text;
  }
  ASSERT_EQ(got.size(), 2u);  // the expired one is dropped
  EXPECT_EQ(got[1], want[1]);
  EXPECT_EQ(got[2], want[2]);
  EXPECT_FALSE(got[1].empty());
  EXPECT_NE(got[1], got[2]);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].message, stage::StageMessage(stage::Credit{3}));  // every item's credit
}

TEST_F(WorkerStages, PostprocessorResultsCarryTheUsageAndACutTextEndsByStop) {
  postprocessor::PostprocessorStage stage(*tokenizer_,
                                          postprocessor::postprocessor_options(config_), metrics_);
  worker::WorkerOutbox out;
  std::vector<stage::DecodedItem> items;
  for (uint64_t r = 1; r <= 2; ++r) {
    stage::DecodedItem w = decoded(r);
    w.ids = {0};
    for (int id : (*tokenizer_)->encode("hello world")) w.ids.push_back(id);
    w.prompt_tokens = 7;
    w.finish_reason = protocol::FinishReason::kEos;
    items.push_back(w);
  }
  items[1].params.stop = {"world"};  // the model spelled it within the text: cut, so stop
  const uint32_t generated = static_cast<uint32_t>(items[0].ids.size() - 1);
  stage.handle(stage::Postprocess{items}, out);
  std::map<uint64_t, stage::ResultItem> got;
  for (const auto& [gw, m] : out.pushes) {
    for (const auto& i : as<stage::Result>(m).items) got[i.request] = i;
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].prompt_tokens, 7u);
  EXPECT_EQ(got[1].completion_tokens, generated);  // the start token is not generated
  EXPECT_EQ(got[1].finish_reason, protocol::FinishReason::kEos);
  EXPECT_EQ(got[2].text, "hello ");
  EXPECT_EQ(got[2].completion_tokens, generated);
  EXPECT_EQ(got[2].finish_reason, protocol::FinishReason::kStop);
}

TEST(CutBeforeStop, CutsBeforeTheEarliestStopSequence) {
  EXPECT_EQ(postprocessor::cut_before_stop("one. two! three", {"!", "."}), "one");
  EXPECT_EQ(postprocessor::cut_before_stop("one two", {"!"}), "one two");
  EXPECT_EQ(postprocessor::cut_before_stop("stop here", {"stop"}), "");
  EXPECT_EQ(postprocessor::cut_before_stop("caf\xc3\xa9 au lait", {"\xc3\xa9"}), "caf");
}

TEST(StablePrefix, HoldsBackTheLastWordAndWhatMayBecomeAStopSequence) {
  using postprocessor::stable_prefix;
  EXPECT_EQ(stable_prefix("one two thr", {}), "one two ");  // "thr" may still grow
  EXPECT_EQ(stable_prefix("one", {}), "");
  EXPECT_EQ(stable_prefix("one two ", {}), "one two ");
  // A UTF-8 sequence cut between tokens is never sent: it is part of the last word.
  EXPECT_EQ(stable_prefix("caf\xc3", {}), "");
  EXPECT_EQ(stable_prefix("au caf\xc3", {}), "au ");
  EXPECT_EQ(stable_prefix("one two. three four", {"."}), "one ");  // cut, then the last word
  // A suffix that may still become a stop sequence waits, however many words it spans.
  EXPECT_EQ(stable_prefix("one two the end is", {"the end is near"}), "one two ");
  EXPECT_EQ(stable_prefix("one two the end is far", {"the end is near"}), "one two the end is ");
  EXPECT_EQ(stable_prefix("one two END", {"ENDING"}), "one two ");
  // Each partial is a prefix of the next and of the final text, token by token.
  const std::vector<std::string> stop = {"lait"};
  const std::string final_text(postprocessor::cut_before_stop("un caf\xc3\xa9 au lait", stop));
  const std::string full = "un caf\xc3\xa9 au lait chaud";
  std::string previous;
  for (size_t n = 0; n <= full.size(); ++n) {
    const std::string now(stable_prefix(full.substr(0, n), stop));
    EXPECT_TRUE(now.starts_with(previous)) << n;
    EXPECT_TRUE(final_text.starts_with(now)) << n;
    previous = now;
  }
}

// A streamed sequence's ids so far go out after every step as partial items (no credits), the
// final one as usual; the postprocessor turns partials into stable prefixes of the final text.
TEST_F(WorkerStages, AStreamedSequenceSendsPartialsThatArePrefixesOfItsText) {
  decoder::DecoderStage decoder(*model_, decoder::decoder_options(config_), metrics_);
  worker::WorkerOutbox decoded_out;
  stage::EncodedItem item = encoded(1, "teh speling", 1);
  item.params.max_new_tokens = item.params.min_new_tokens = 12;
  item.stream = true;
  decoder.handle(stage::Decode{{item}}, decoded_out);
  for (int steps = 0; decoder.has_pending_work() && steps < 100; ++steps) decoder.work(decoded_out);
  std::vector<stage::DecodedItem> partials;
  std::optional<stage::DecodedItem> final_item;
  int credits = 0;
  for (const auto& send : decoded_out.sends) {
    const auto& d = as<stage::Decoded>(send.message);
    credits += d.credits;
    for (const auto& i : d.items) {
      if (i.partial) {
        partials.push_back(i);
      } else {
        final_item = i;
      }
    }
  }
  ASSERT_TRUE(final_item);
  EXPECT_EQ(credits, 1);            // the final's slot only
  ASSERT_EQ(partials.size(), 11u);  // after every step but the last
  for (size_t k = 0; k < partials.size(); ++k) {
    ASSERT_EQ(partials[k].ids.size(), k + 2);  // the start token and k + 1 tokens
    EXPECT_TRUE(
        std::equal(partials[k].ids.begin(), partials[k].ids.end(), final_item->ids.begin()));
    EXPECT_TRUE(partials[k].stream);
  }
  postprocessor::PostprocessorStage post(*tokenizer_, postprocessor::postprocessor_options(config_),
                                         metrics_);
  worker::WorkerOutbox out;
  stage::Postprocess work;
  work.items = partials;
  work.items.push_back(*final_item);
  post.handle(std::move(work), out);
  std::vector<stage::ResultItem> results;
  for (const auto& [gateway, m] : out.pushes) {
    for (const auto& r : as<stage::Result>(m).items) results.push_back(r);
  }
  ASSERT_EQ(results.size(), partials.size() + 1);
  EXPECT_FALSE(results.back().partial);
  const std::string final_text = results.back().text;
  EXPECT_EQ(
      final_text,
      (*tokenizer_)->decode(std::vector<int>(final_item->ids.begin(), final_item->ids.end())));
  std::string previous;
  for (size_t k = 0; k < partials.size(); ++k) {
    EXPECT_TRUE(results[k].partial);
    EXPECT_TRUE(results[k].text.starts_with(previous));
    EXPECT_TRUE(final_text.starts_with(results[k].text));
    previous = results[k].text;
  }
}

// The decoder returns num_return_sequences hypotheses with their scores; the postprocessor
// turns them into texts, each cut before a stop sequence.
TEST_F(WorkerStages, NumReturnSequencesAndStopReachTheResult) {
  decoder::DecoderStage decoder(*model_, decoder::decoder_options(config_), metrics_);
  worker::WorkerOutbox decoded_out;
  stage::EncodedItem item = encoded(1, "teh speling", 4);
  item.params.num_return_sequences = 3;
  decoder.handle(stage::Decode{{item}}, decoded_out);
  for (int steps = 0; decoder.has_pending_work() && steps < 100; ++steps) decoder.work(decoded_out);
  ASSERT_EQ(decoded_out.sends.size(), 1u);
  stage::DecodedItem d = as<stage::Decoded>(decoded_out.sends[0].message).items.at(0);
  engine::DecodingOptions o;
  o.max_new_tokens = 12;
  o.num_beams = 4;
  o.num_return_sequences = 3;
  const auto want = engine::generate(*model_, {(*tokenizer_)->encode("teh speling")}, o).at(0);
  ASSERT_EQ(d.alternatives.size(), 2u);
  EXPECT_EQ(d.alternative_scores, want.alternative_scores);
  const std::string first_alt =
      (*tokenizer_)->decode(std::vector<int>(d.alternatives[0].begin(), d.alternatives[0].end()));
  ASSERT_GE(first_alt.size(), 2u);
  d.params.stop = {first_alt.substr(1, 1)};  // a character of the first alternative
  postprocessor::PostprocessorStage post(*tokenizer_, postprocessor::postprocessor_options(config_),
                                         metrics_);
  worker::WorkerOutbox out;
  post.handle(stage::Postprocess{{d}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  const stage::ResultItem& r = as<stage::Result>(out.pushes[0].second).items.at(0);
  ASSERT_EQ(r.alternatives.size(), 2u);
  EXPECT_EQ(r.alternative_scores, want.alternative_scores);
  EXPECT_EQ(r.alternatives[0], postprocessor::cut_before_stop(first_alt, d.params.stop));
  EXPECT_LT(r.alternatives[0].size(), first_alt.size());
  EXPECT_EQ(r.text.find(d.params.stop[0]), std::string::npos);
  EXPECT_EQ(r.score, want.score);
}

}  // namespace
}  // namespace seqpipe
