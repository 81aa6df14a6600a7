// The speller's word handling through the stages (known words, Aspell, lower-cased words) and
// the warm-up, the stages driven directly (worker_stages_fixture.h).
#include <gtest/gtest.h>

#include "worker_stages_fixture.h"

namespace seqpipe {
namespace {

TEST_F(WorkerStages, WithKnownWordsTheTextTravelsAndKnownInputWordsAreKept) {
  const std::string words = testing::TempDir() + "stage_known_words.txt";
  std::ofstream(words) << "hello\nworld\n";
  config_.postprocessor.known_words = words;
  // The tokenizer keeps the input text for the postprocessor's guard.
  tokenizer::TokenizerStage tokenizer(*tokenizer_, tokenizer::tokenizer_options(config_), metrics_);
  worker::WorkerOutbox tokenized;
  tokenizer.handle(stage::Tokenize{{item(1, "hello wrld")}}, tokenized);
  ASSERT_EQ(tokenized.pushes.size(), 1u);
  stage::SequenceItem s = as<stage::Sequence>(tokenized.pushes[0].second).items.at(0);
  EXPECT_EQ(s.text, "hello wrld");
  // The text rides along to the postprocessor. The "model" says "help world": the known input
  // word "hello" comes back, "world" stays.
  std::string text = std::move(s.text);
  auto w = stage::next_hop<stage::DecodedItem>(std::move(s));
  w.text = std::move(text);
  w.ids = {0};
  for (int id : (*tokenizer_)->encode("help world")) w.ids.push_back(id);
  postprocessor::PostprocessorStage stage(*tokenizer_,
                                          postprocessor::postprocessor_options(config_), metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{w}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items.at(0).text, "hello world");
  // A list that cannot be read fails at start-up, naming the key and the file.
  config_.postprocessor.known_words = words + ":/nonexistent/words";
  EXPECT_THROW(postprocessor::PostprocessorStage(
                   *tokenizer_, postprocessor::postprocessor_options(config_), metrics_),
               std::runtime_error);
  std::remove(words.c_str());
}

TEST_F(WorkerStages, TheHypothesesScoresDecideWhetherAKnownWordChanges) {
  const std::string words = testing::TempDir() + "stage_known_words3.txt";
  std::ofstream(words) << "he\nis\ntaller\nthen\nthan\nme\n";
  config_.postprocessor.known_words = words;
  config_.postprocessor.known_word_margin = 20;
  // The best hypothesis ("than") and the next one, which keeps "then", with their scores.
  auto decoded = [&](float best, float keeping) {
    stage::DecodedItem w;
    w.text = "he is taller then me";
    auto ids = [&](const std::string& t) {
      std::vector<int32_t> out = {0};
      for (int id : (*tokenizer_)->encode(t)) out.push_back(id);
      return out;
    };
    w.ids = ids("he is taller than me");
    w.score = best;
    w.alternatives = {ids("he is taller then me")};
    w.alternative_scores = {keeping};
    return w;
  };
  postprocessor::PostprocessorStage stage(*tokenizer_,
                                          postprocessor::postprocessor_options(config_), metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{decoded(-0.1f, -0.5f), decoded(-0.1f, -0.2f)}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  const auto& results = as<stage::Result>(out.pushes[0].second).items;
  ASSERT_EQ(results.size(), 2u);
  // 0.4 above the hypothesis keeping "then": over the margin of 0.20; 0.1: under it.
  EXPECT_EQ(results[0].text, "he is taller than me");
  EXPECT_EQ(results[1].text, "he is taller then me");
  std::remove(words.c_str());
}

TEST_F(WorkerStages, WithAspellAloneTheTextTravelsToThePostprocessor) {
  config_.postprocessor.aspell_dictionary = "/usr/lib/aspell/en_US.multi";
  tokenizer::TokenizerStage tokenizer(*tokenizer_, tokenizer::tokenizer_options(config_), metrics_);
  worker::WorkerOutbox tokenized;
  tokenizer.handle(stage::Tokenize{{item(1, "helo wrld")}}, tokenized);
  ASSERT_EQ(tokenized.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Sequence>(tokenized.pushes[0].second).items.at(0).text, "helo wrld");
}

TEST_F(WorkerStages, WithLowerCaseWordsTheModelSeesPlainWordsAndTheTextIsPutBack) {
  config_.model.lower_case_words = 1;
  tokenizer::TokenizerStage tokenizer(*tokenizer_, tokenizer::tokenizer_options(config_), metrics_);
  worker::WorkerOutbox tokenized;
  tokenizer.handle(stage::Tokenize{{item(1, "HELO WRLD, AT 5pm 😀")}}, tokenized);
  ASSERT_EQ(tokenized.pushes.size(), 1u);
  stage::SequenceItem s = as<stage::Sequence>(tokenized.pushes[0].second).items.at(0);
  const auto want = (*tokenizer_)->encode("helo wrld at");
  EXPECT_EQ(s.ids, std::vector<int32_t>(want.begin(), want.end()));
  EXPECT_EQ(s.text, "HELO WRLD, AT 5pm 😀");  // forwarded for the postprocessor
  std::string text = std::move(s.text);
  auto w = stage::next_hop<stage::DecodedItem>(std::move(s));
  w.text = std::move(text);
  // The "model" says "hello world at": each word takes its input's case (a text all in
  // capitals: its style, not acronyms), the rest is kept.
  w.ids = {0};
  for (int id : (*tokenizer_)->encode("hello world at")) w.ids.push_back(id);
  postprocessor::PostprocessorStage stage(*tokenizer_,
                                          postprocessor::postprocessor_options(config_), metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{w}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items.at(0).text, "HELLO WORLD, AT 5pm 😀");
}

TEST_F(WorkerStages, WithLowerCaseWordsTheUsersWordsAreKeptWhateverTheModelMakesOfThem) {
  config_.model.lower_case_words = 1;
  config_.postprocessor.user_words =
      std::string(SEQPIPE_SOURCE_DIR) + "/tests/e2e/speller/user_words.txt";
  tokenizer::TokenizerStage tokenizer(*tokenizer_, tokenizer::tokenizer_options(config_), metrics_);
  worker::WorkerOutbox tokenized;
  tokenizer.handle(stage::Tokenize{{item(1, "restart Nginx, Kowalski")}}, tokenized);
  ASSERT_EQ(tokenized.pushes.size(), 1u);
  stage::SequenceItem s = as<stage::Sequence>(tokenized.pushes[0].second).items.at(0);
  std::string text = std::move(s.text);
  auto w = stage::next_hop<stage::DecodedItem>(std::move(s));
  w.text = std::move(text);
  w.ids = {0};
  for (int id : (*tokenizer_)->encode("restore ngnex kawasaki")) w.ids.push_back(id);
  postprocessor::PostprocessorStage stage(*tokenizer_,
                                          postprocessor::postprocessor_options(config_), metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{w}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items.at(0).text, "restore Nginx, Kowalski");
}

TEST_F(WorkerStages, WithLowerCaseWordsALongTextGivesTheModelTheWordsThatFit) {
  config_.model.lower_case_words = 1;
  tokenizer::TokenizerStage tokenizer(*tokenizer_, tokenizer::tokenizer_options(config_), metrics_);
  std::string text = "Teh";
  for (int i = 0; i < 100; ++i) text += " speling, 42";
  worker::WorkerOutbox tokenized;
  tokenizer.handle(stage::Tokenize{{item(1, text)}}, tokenized);
  ASSERT_EQ(tokenized.pushes.size(), 1u);  // no too_long: a sequence for the batcher
  stage::SequenceItem s = as<stage::Sequence>(tokenized.pushes[0].second).items.at(0);
  EXPECT_EQ(s.text, text);
  ASSERT_LE(s.ids.size(), static_cast<size_t>(config_.model.max_input_tokens));
  // The longest prefix of the words that fits.
  std::string prefix = "teh", longer;
  while (true) {
    longer = prefix + " speling";
    if (static_cast<int>((*tokenizer_)->encode(longer).size()) > config_.model.max_input_tokens)
      break;
    prefix = longer;
  }
  const auto want = (*tokenizer_)->encode(prefix);
  EXPECT_EQ(s.ids, std::vector<int32_t>(want.begin(), want.end()));
  auto w = stage::next_hop<stage::DecodedItem>(std::move(s));
  w.text = text;
  // The "model" corrects what it saw; the words it did not see stay as they are.
  w.ids = {0};
  std::string corrected = prefix;
  for (size_t at; (at = corrected.find("speling")) != std::string::npos;)
    corrected.replace(at, 7, "spelling");
  corrected.replace(0, 3, "the");
  for (int id : (*tokenizer_)->encode(corrected)) w.ids.push_back(id);
  postprocessor::PostprocessorStage stage(*tokenizer_,
                                          postprocessor::postprocessor_options(config_), metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{w}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  const std::string& got = as<stage::Result>(out.pushes[0].second).items.at(0).text;
  const size_t seen = static_cast<size_t>(std::count(prefix.begin(), prefix.end(), ' '));
  std::string want_text = "The";
  for (int i = 0; i < 100; ++i)
    want_text += static_cast<size_t>(i) < seen ? " spelling, 42" : " speling, 42";
  EXPECT_EQ(got, want_text);
}

TEST_F(WorkerStages, WithKnownWordsTheFirstKnownBeamHypothesisWins) {
  const std::string words = testing::TempDir() + "stage_known_words2.txt";
  std::ofstream(words) << "hello\nworld\nhelp\n";
  config_.postprocessor.known_words = words;
  auto ids_of = [&](const std::string& text) {
    std::vector<int32_t> ids = {0};
    for (int id : (*tokenizer_)->encode(text)) ids.push_back(id);
    return ids;
  };
  stage::DecodedItem w = decoded(1);
  w.text = "helo wrld";         // the input, as the tokenizer forwards it
  w.ids = ids_of("help wrld");  // the best hypothesis: "wrld" is no word
  w.alternatives = {ids_of("helo world"), ids_of("hello world"), ids_of("help world")};
  stage::DecodedItem known_best = decoded(2);
  known_best.text = "helo wrld";
  known_best.ids = ids_of("help world");  // all known: it stays, whatever follows
  known_best.alternatives = {ids_of("hello world")};
  postprocessor::PostprocessorStage stage(*tokenizer_,
                                          postprocessor::postprocessor_options(config_), metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{w, known_best}}, out);
  std::map<uint64_t, std::string> got;
  for (const auto& [gw, m] : out.pushes) {
    for (const auto& i : as<stage::Result>(m).items) got[i.request] = i.text;
  }
  EXPECT_EQ(got[1], "hello world");
  EXPECT_EQ(got[2], "help world");
  std::remove(words.c_str());
}

TEST_F(WorkerStages, WarmUpLeavesTheStagesReadyAndEmpty) {
  config_.decoder.warmup_batch_size = 20;  // more than the 8 slots: capped
  config_.decoder.max_new_tokens = 2;      // shorter than the warm-up's 4 steps: capped
  decoder::DecoderStage decoder(*model_, decoder::decoder_options(config_), metrics_);
  EXPECT_TRUE(decoder.warm_up());
  EXPECT_EQ(decoder.free_slots(), 8);
  EXPECT_FALSE(decoder.has_pending_work());
  encoder::EncoderStage encoder(*model_, encoder::encoder_options(config_), metrics_);
  EXPECT_TRUE(encoder.warm_up());
  config_.decoder.warmup_batch_size = 0;
  config_.encoder.warmup_batch_size = 0;
  EXPECT_FALSE(
      decoder::DecoderStage(*model_, decoder::decoder_options(config_), metrics_).warm_up());
  EXPECT_FALSE(
      encoder::EncoderStage(*model_, encoder::encoder_options(config_), metrics_).warm_up());
  // A warmed decoder still decodes exactly as the engine does.
  worker::WorkerOutbox out;
  config_.decoder.max_new_tokens = 12;
  config_.decoder.warmup_batch_size = 4;
  decoder::DecoderStage warmed(*model_, decoder::decoder_options(config_), metrics_);
  ASSERT_TRUE(warmed.warm_up());
  warmed.handle(stage::Decode{{encoded(1, "hello world")}}, out);
  while (warmed.has_pending_work()) warmed.work(out);
  const auto want = reference("hello world", 1);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(as<stage::Decoded>(out.sends[0].message).items.at(0).ids,
            std::vector<int32_t>(want.begin(), want.end()));
}

}  // namespace
}  // namespace seqpipe
