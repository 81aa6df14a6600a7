// Streams of the bundled speller, whose postprocessor rewrites words after decoding: which words
// are final (postprocessor::final_words), how the gateway joins a split text's pieces so far
// (text::joined_so_far), and that the postprocessor's partials of real greedy outputs add up to
// exactly the text a request without `stream` gets.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "postprocessor/final_words.h"
#include "postprocessor/postprocessor_stage.h"
#include "seqpipe/config/config.h"
#include "text/text_pieces.h"
#include "text/word_alignment.h"

namespace seqpipe {
namespace {

using postprocessor::final_words;
using text::split_words;

size_t final_of(std::string_view input, const std::vector<std::string>& steps, size_t decoded,
                const std::function<bool(std::string_view)>& context = {}) {
  std::vector<std::vector<std::string_view>> alignments;
  for (const auto& s : steps) alignments.push_back(split_words(s));
  return final_words(split_words(input), alignments, decoded, context);
}

TEST(FinalWords, WordsTheOutputRepeatsAreFinalOnceDecoded) {
  // The output so far "i have a " and the rest of the input copied after it.
  EXPECT_EQ(final_of("i have a dream", {"i have a dream"}, 3), 3u);
  EXPECT_EQ(final_of("i have a dream", {"i have a dream"}, 1), 1u);
  EXPECT_EQ(final_of("i have a dream", {"i have a dream"}, 0), 0u);
  EXPECT_EQ(final_of("i have a dream", {"i have a dream"}, 9), 4u);
}

TEST(FinalWords, ASubstitutionIsFinalOnlyOnceADecodedRepeatedWordClosesIt) {
  // "teh" -> "the": open until "cat" is decoded (the model could still insert or split there).
  EXPECT_EQ(final_of("teh cat sat", {"the cat sat"}, 1), 0u);
  EXPECT_EQ(final_of("teh cat sat", {"the cat sat"}, 2), 2u);
  // Two substitutions in a row close together.
  EXPECT_EQ(final_of("teh speling is bad", {"the spelling is bad"}, 2), 0u);
  EXPECT_EQ(final_of("teh speling is bad", {"the spelling is bad"}, 3), 3u);
  // Substituted up to the end of the input: nothing repeats after them.
  EXPECT_EQ(final_of("teh speling", {"the spelling"}, 2), 0u);
}

TEST(FinalWords, AWordThatRepeatsInTheInputDoesNotCloseAGap) {
  // A shorter output could align "cat" with its second place: "sat" settles it.
  EXPECT_EQ(final_of("teh cat sat on a cat", {"the cat sat on a cat"}, 2), 0u);
  EXPECT_EQ(final_of("teh cat sat on a cat", {"the cat sat on a cat"}, 3), 3u);
  // A changed word that occurs again in the input, or a word put for it that occurs in it, stops
  // the final words: a longer output could align it there.
  EXPECT_EQ(final_of("daffodlis galore and daffodlis galore",
                     {"daffodils galore and daffodlis galore"}, 3),
            0u);
  EXPECT_EQ(final_of("teh cat saw the dog", {"the cat saw the dog"}, 3), 0u);
  EXPECT_EQ(final_of("a teh cat", {"a the cat"}, 3), 3u);
  // Before any gap, the output's first words are matched as they come, repeats or not.
  EXPECT_EQ(final_of("the cat and the dog", {"the cat and the dgo"}, 4), 4u);
}

TEST(FinalWords, ASplitMergeOrInsertionStopsTheFinalWords) {
  EXPECT_EQ(final_of("i want alot of tea", {"i want a lot of tea"}, 5), 2u);  // a split
  EXPECT_EQ(final_of("go any way you like", {"go anyway you like"}, 4), 1u);  // a merge
  EXPECT_EQ(final_of("a b c", {"a x b c"}, 4), 1u);                           // an insertion
}

TEST(FinalWords, EveryRewritesAlignmentMustSettleTheWord) {
  // The model copied "teh", a later step (Aspell) changed it: still closed by "cat".
  EXPECT_EQ(final_of("teh cat sat", {"teh cat sat", "the cat sat"}, 2), 2u);
  // A later step merged words the model kept apart.
  EXPECT_EQ(final_of("any way it goes", {"any way it goes", "anyway it goes"}, 4), 0u);
}

TEST(FinalWords, AWordWhoseContextDecidesWaitsForTheTwoWordsAfterIt) {
  auto confusable = [](std::string_view w) { return w == "then" || w == "than"; };
  const std::vector<std::string> steps = {"taller then me and you"};
  EXPECT_EQ(final_of("taller then me and you", steps, 2, confusable), 1u);
  EXPECT_EQ(final_of("taller then me and you", steps, 3, confusable), 1u);
  EXPECT_EQ(final_of("taller then me and you", steps, 4, confusable), 4u);
  // The word a rewrite put in its place counts too.
  EXPECT_EQ(final_of("taller thne me and you", {"taller than me and you"}, 3, confusable), 1u);
}

TEST(JoinedSoFar, IsTheDonePiecesJoinedThenThePartialOfTheNext) {
  const std::string whole = "  one two. three four.\nfive  ";
  const auto pieces = text::split_text(whole, 2);
  ASSERT_EQ(pieces.size(), 3u);
  std::vector<std::string> outputs = {"ONE TWO.", "THR", ""};
  EXPECT_EQ(text::joined_so_far(whole, pieces, outputs, 0), "  ONE TWO.");
  EXPECT_EQ(text::joined_so_far(whole, pieces, outputs, 1), "  ONE TWO. THR");
  outputs = {"ONE TWO.", "THREE FOUR.", "FI"};
  EXPECT_EQ(text::joined_so_far(whole, pieces, outputs, 2), "  ONE TWO. THREE FOUR.\nFI");
  outputs[2] = "FIVE";
  EXPECT_EQ(text::joined_so_far(whole, pieces, outputs, 3), "  ONE TWO. THREE FOUR.\nFIVE  ");
  EXPECT_EQ(text::joined_so_far(whole, pieces, outputs, 3),
            text::join_pieces(whole, pieces, outputs));
  EXPECT_THROW(text::joined_so_far(whole, pieces, outputs, 4), std::invalid_argument);
}

// The speller as served (models/speller-t5/seqpipe.yaml: the text frame, the word lists, Aspell
// with the noisy channel, the confusion sets) on PyTorch's greedy ids for 200 held-out noisy
// inputs (tests/data/speller-t5-greedy.json), each also as a user types it (capitalised, with
// punctuation): the partials after every decoder step, as the gateway streams them (what
// extends the text sent so far), add up to exactly the final text.
void expect_partials_add_up(bool lower_case_words) {
  const std::string model = SEQPIPE_SOURCE_DIR "/models/speller-t5";
  config::PipelineConfig config = config::load_config(SEQPIPE_SOURCE_DIR "/config/pipeline.yaml",
                                                      config::model_overrides(model));
  ASSERT_NE(config.model.lower_case_words, 0);
  config.model.lower_case_words = lower_case_words ? 1 : 0;
  ASSERT_FALSE(config.postprocessor.confusion_counts.empty());
  auto registry = metrics::make_registry();
  metrics::StageMetrics metrics(*registry, "test");
  const auto tokenizer = std::make_shared<engine::Tokenizer>(model + "/spiece.model");
  postprocessor::PostprocessorStage post(tokenizer, postprocessor::postprocessor_options(config),
                                         metrics);
  std::ifstream in(SEQPIPE_SOURCE_DIR "/tests/data/speller-t5-greedy.json");
  const auto cases = nlohmann::json::parse(in).at("cases");
  ASSERT_GE(cases.size(), 200u);
  size_t texts = 0, streamed_early = 0, words_early = 0, partials = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    std::string typed = text;
    typed[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(typed[0])));
    for (const std::string& input : {text, "\"" + typed + ", ok?\" (" + text + ")"}) {
      // The second form's model text differs: its ids are only those of the first part, which
      // is what a model that stops early gives too; the texts still must add up.
      const std::vector<int32_t> ids = c.at("ids");
      // A partial's text depends only on the complete words decoded (stable_prefix): the steps
      // that complete none would repeat the one before, so only the others are sent.
      stage::Postprocess work;
      size_t words = 0;
      for (size_t n = 2; n <= ids.size(); ++n) {
        if (n < ids.size()) {
          const std::string decoded =
              tokenizer->decode(std::vector<int>(ids.begin(), ids.begin() + n));
          const size_t now = split_words(postprocessor::stable_prefix(decoded, {})).size();
          if (now == words) continue;
          words = now;
        }
        stage::DecodedItem item;
        item.request = 1;
        item.gateway = "gw";
        item.deadline = Deadline::after(Now::read(), std::chrono::seconds(60));
        item.text = input;
        item.ids.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
        item.partial = n < ids.size();
        item.stream = true;
        work.items.push_back(std::move(item));
      }
      const std::vector<stage::DecodedItem> work_copy = work.items;
      worker::WorkerOutbox out;
      post.handle(std::move(work), out);
      std::vector<stage::ResultItem> results;
      for (const auto& [gateway, m] : out.pushes)
        for (const auto& r : std::get<stage::Result>(m).items) results.push_back(r);
      ASSERT_FALSE(results.empty());
      EXPECT_EQ(post.streams_kept(), 0u) << "the final item ends the stream";
      const std::string final_text = results.back().text;
      // The same ids without `stream` (no partials before, nothing kept) get the same text, and
      // each partial worked out whole (its own sequence, ended at once: nothing kept) the same
      // text as it did with the stream's final words kept.
      stage::Postprocess alone;
      alone.items.push_back(work_copy.back());
      alone.items.back().stream = false;
      alone.items.back().request = 2;
      for (size_t k = 0; k + 1 < work_copy.size(); ++k) {
        alone.items.push_back(work_copy[k]);
        alone.items.push_back(work_copy.back());
        alone.items.end()[-2].request = alone.items.end()[-1].request = 3 + k;
      }
      worker::WorkerOutbox alone_out;
      post.handle(std::move(alone), alone_out);
      EXPECT_EQ(post.streams_kept(), 0u);
      std::vector<stage::ResultItem> whole;
      for (const auto& [gateway, m] : alone_out.pushes)
        for (const auto& r : std::get<stage::Result>(m).items) whole.push_back(r);
      ASSERT_EQ(whole.size(), 2 * results.size() - 1);
      EXPECT_EQ(whole[0].text, final_text) << input;
      for (size_t k = 0; k + 1 < results.size(); ++k)
        EXPECT_EQ(whole[1 + 2 * k].text, results[k].text) << input << ", partial " << k;
      std::string sent;
      for (size_t k = 0; k + 1 < results.size(); ++k) {
        const std::string& t = results[k].text;
        if (t.size() > sent.size() && t.starts_with(sent)) sent = t;  // as the gateway sends
        ASSERT_TRUE(t.empty() || sent.starts_with(t)) << input << ": partials went back";
      }
      EXPECT_TRUE(final_text.starts_with(sent))
          << input << ": streamed '" << sent << "', final '" << final_text << "'";
      ++texts;
      partials += results.size() - 1;
      if (!sent.empty()) ++streamed_early;
      words_early += split_words(sent).size();
    }
  }
  // Streaming is more than the whole text at the end: many texts send words before it.
  std::printf("%zu texts, %zu partials, %zu texts streamed words before the end, %zu words\n",
              texts, partials, streamed_early, words_early);
  EXPECT_GT(streamed_early, texts / 5);
}

// A stream's final words are kept from its first partial to its final item (or its deadline),
// and no more streams at once than batcher.max_queue_size: the least recently used goes first.
TEST(SpellerStream, KeptStreamsEndWithTheirSequenceAndAreBounded) {
  const std::string model = SEQPIPE_SOURCE_DIR "/models/speller-t5";
  config::PipelineConfig config = config::load_config(SEQPIPE_SOURCE_DIR "/config/pipeline.yaml",
                                                      config::model_overrides(model));
  config.batcher.max_queue_size = 16;
  auto registry = metrics::make_registry();
  metrics::StageMetrics metrics(*registry, "test");
  const auto tokenizer = std::make_shared<engine::Tokenizer>(model + "/spiece.model");
  postprocessor::PostprocessorStage post(tokenizer, postprocessor::postprocessor_options(config),
                                         metrics);
  const auto ids = tokenizer->encode("the spelling is bad");
  auto item = [&](uint64_t request, bool partial, std::chrono::seconds left) {
    stage::DecodedItem d;
    d.request = request;
    d.gateway = "gw";
    d.deadline = Deadline::after(Now::read(), left);
    d.text = "teh speling is bad";
    d.ids = {0};
    d.ids.insert(d.ids.end(), ids.begin(), ids.end() - (partial ? 1 : 0));
    d.partial = partial;
    d.stream = true;
    return d;
  };
  auto send = [&](stage::DecodedItem d) {
    stage::Postprocess work;
    work.items.push_back(std::move(d));
    worker::WorkerOutbox out;
    post.handle(std::move(work), out);
    return out.pushes.empty() ? std::string("(none)")
                              : std::get<stage::Result>(out.pushes.back().second).items.at(0).text;
  };
  const auto partial = send(item(1, true, std::chrono::seconds(60)));
  EXPECT_EQ(post.streams_kept(), 1u);
  EXPECT_EQ(send(item(1, true, std::chrono::seconds(60))), partial);  // from what it kept
  EXPECT_EQ(send(item(1, false, std::chrono::seconds(60))), "the spelling is bad");
  EXPECT_EQ(post.streams_kept(), 0u);
  send(item(2, true, std::chrono::seconds(60)));
  send(item(2, false, std::chrono::seconds(-1)));  // past its deadline: no text, still ended
  EXPECT_EQ(post.streams_kept(), 0u);
  const size_t most = post.max_streams();
  ASSERT_EQ(most, 16u);
  for (uint64_t r = 10; r < 10 + most + 5; ++r) send(item(r, true, std::chrono::seconds(60)));
  EXPECT_EQ(post.streams_kept(), most);
  // The oldest went first: the newest is still kept, and ending it leaves one fewer.
  send(item(10 + most + 4, false, std::chrono::seconds(60)));
  EXPECT_EQ(post.streams_kept(), most - 1);
  send(item(10, false, std::chrono::seconds(60)));  // dropped already: nothing to end
  EXPECT_EQ(post.streams_kept(), most - 1);
}

TEST(SpellerStream, PartialsOfRealOutputsAddUpToTheFinalText) {
  expect_partials_add_up(true);
}

// The rewrites without the text frame: the output's words are the text.
TEST(SpellerStream, PartialsAddUpWithoutTheTextFrameToo) {
  expect_partials_add_up(false);
}

}  // namespace
}  // namespace seqpipe
