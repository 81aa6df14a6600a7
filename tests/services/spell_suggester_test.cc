#include "postprocessor/spell_suggester.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace seqpipe::postprocessor {
namespace {

// Debian aspell-en's dictionary (scripts/debian-packages.txt).
const SpellSuggester& aspell() {
  static const SpellSuggester suggester("/usr/lib/aspell/en_US.multi");
  return suggester;
}

TEST(SpellSuggester, ChecksAndSuggestsLowerCased) {
  EXPECT_TRUE(aspell().correct("spelling"));
  EXPECT_FALSE(aspell().correct("speling"));
  const auto s = aspell().suggest("teh", 5);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0], "the");
  EXPECT_TRUE(std::none_of(s.begin(), s.end(), [](const std::string& w) {
    return std::any_of(w.begin(), w.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
  }));
}

TEST(SpellSuggester, TheModelsWordStandsWhenAspellSuggestsItElseAspellsFirst) {
  EXPECT_EQ(aspell().choose("teh speling", "the spelling", nullptr), "the spelling");
  const auto s = aspell().suggest("speling", 10);
  ASSERT_GT(s.size(), SpellSuggester::kAgreeing);
  const std::string unsuggested = s[SpellSuggester::kAgreeing];  // 6th: not among the first 5
  EXPECT_EQ(aspell().choose("speling", unsuggested, nullptr), s[0]);
  EXPECT_EQ(aspell().choose("speling", s[1], nullptr), s[1]);
}

TEST(SpellSuggester, LeavesKnownAndUnchangedWordsAndSplitsAlone) {
  EXPECT_EQ(aspell().choose("the", "thee", nullptr), "thee");            // Aspell knows "the"
  EXPECT_EQ(aspell().choose("speling", "speling", nullptr), "speling");  // the model kept it
  const KnownWords known({"speling"});
  EXPECT_EQ(aspell().choose("speling", "spoiling", &known), "spoiling");  // the lists know it
  EXPECT_EQ(aspell().choose("alot", "a lot", nullptr), "a lot");          // not word for word
  EXPECT_EQ(aspell().choose("", "", nullptr), "");
}

TEST(SpellSuggester, WithCheckLeftWordsAspellCorrectsWordsTheModelLeft) {
  const SpellSuggester checking("/usr/lib/aspell/en_US.multi", true);
  EXPECT_EQ(checking.choose("teh speling", "teh speling", nullptr), "the spelling");
  EXPECT_EQ(checking.choose("the speling", "the speling", nullptr), "the spelling");
  const KnownWords known({"speling"});
  EXPECT_EQ(checking.choose("speling", "speling", &known), "speling");
}

// Weights of zero but for the given ones.
ChannelWeights only(std::initializer_list<std::pair<double ChannelWeights::*, double>> given) {
  ChannelWeights w{0, 0, 0, 0, 0, 0, 0, 0};
  for (const auto& [feature, weight] : given) w.*feature = weight;
  return w;
}

// A suggester that weighs by `weights` alone, with a few word counts.
SpellSuggester weighing(const ChannelWeights& weights) {
  auto channel = std::make_shared<const NoisyChannel>(
      std::unordered_map<std::string, int64_t>{{"spewing", 100000}, {"zyxel", 1000000}},
      std::unordered_map<std::string, int64_t>{{"dl", 10}, {"de", 10}});
  return SpellSuggester("/usr/lib/aspell/en_US.multi", channel, weights);
}

TEST(SpellSuggester, TheNoisyChannelPicksByItsWeights) {
  const auto s = aspell().suggest("speling", SpellSuggester::kCandidates);
  ASSERT_GE(s.size(), 2u);
  // Aspell's rank alone: its first suggestion, whatever the hypotheses say.
  EXPECT_EQ(
      weighing(only({{&ChannelWeights::aspell_rank, 1}})).choose("speling", s[1], nullptr, {s[1]}),
      s[0]);
  // The hypotheses' rank alone: the best hypothesis's word, Aspell's or not.
  EXPECT_EQ(weighing(only({{&ChannelWeights::hypothesis_rank, 1}}))
                .choose("speling", "spieling", nullptr, {"spieling"}),
            "spieling");
  EXPECT_EQ(weighing(only({{&ChannelWeights::hypothesis_rank, 1}}))
                .choose("speling", "spelling", nullptr, {"spelling", "spieling"}),
            "spelling");
  // The prior alone: the most common candidate, here the second hypothesis's.
  EXPECT_EQ(weighing(only({{&ChannelWeights::log_count, 1}}))
                .choose("speling", "spelling", nullptr, {"spelling", "spewing"}),
            "spewing");
  // A common word stays although Aspell does not know it (a name, a brand).
  EXPECT_EQ(weighing(only({{&ChannelWeights::log_count, 1}})).choose("zyxel", "zyxel", nullptr),
            "zyxel");
  // The error model alone: the typed word itself (no edit) ...
  EXPECT_EQ(
      weighing(only({{&ChannelWeights::edit_cost, 1}})).choose("speling", "spelling", nullptr),
      "speling");
  // ... and with the dictionaries' knowledge, the cheapest known word: one "l" left out.
  EXPECT_EQ(weighing(only({{&ChannelWeights::edit_cost, 1}, {&ChannelWeights::known, 100}}))
                .choose("speling", "spieling", nullptr),
            "spelling");
  // Aspell's first suggestion alone: that one, over the hypothesis.
  EXPECT_EQ(
      weighing(only({{&ChannelWeights::aspell_first, 1}})).choose("speling", s[1], nullptr, {s[1]}),
      s[0]);
  // The last letter alone: a hypothesis ending as the typed word does beats the typed word's
  // first candidates that do not ("spelling" and the word itself end in "g"; "spewing" too).
  EXPECT_EQ(
      weighing(only({{&ChannelWeights::last_letter, 1}, {&ChannelWeights::hypothesis_rank, 0.01}}))
          .choose("speling", "spelt", nullptr, {"spelt", "spelling"}),
      "spelling");
}

TEST(SpellSuggester, TheNoisyChannelLeavesKnownWordsAndSplitsAlone) {
  const auto weigh = weighing(only({{&ChannelWeights::aspell_rank, 1}}));
  EXPECT_EQ(weigh.choose("the", "thee", nullptr), "thee");  // Aspell knows "the"
  const KnownWords known({"speling"});
  EXPECT_EQ(weigh.choose("speling", "spoiling", &known, {"spoiling"}), "spoiling");
  EXPECT_EQ(weigh.choose("", "", nullptr), "");
}

TEST(SpellSuggester, TheNoisyChannelWeighsASplitOfAnUnknownWordAsOneCandidate) {
  // "alot" -> "a lot": the hypotheses' two words compete with Aspell's one-word suggestions.
  EXPECT_EQ(weighing(only({{&ChannelWeights::hypothesis_rank, 1}}))
                .choose("alot", "a lot", nullptr, {"a lot", "allot"}),
            "a lot");
  EXPECT_EQ(weighing(only({{&ChannelWeights::hypothesis_rank, 1}}))
                .choose("alot", "a lot", nullptr, {"allot", "a lot"}),
            "allot");
  // A known word split stays split (not weighed).
  EXPECT_EQ(weighing(only({{&ChannelWeights::hypothesis_rank, 1}}))
                .choose("the", "th e", nullptr, {"th e"}),
            "th e");
}

TEST(SpellSuggester, TheTunedWeightsWithTheBundledCountsCorrectCommonMisspellings) {
  const std::string model = SEQPIPE_SOURCE_DIR "/models/speller-t5/";
  const SpellSuggester tuned("/usr/lib/aspell/en_US.multi",
                             std::make_shared<const NoisyChannel>(NoisyChannel::load(
                                 model + "word_counts.tsv", model + "edit_counts.tsv")),
                             ChannelWeights{});
  // The model left both words: Aspell's candidates, the prior and the error model fix them.
  EXPECT_EQ(tuned.choose("teh speling", "teh speling", nullptr, {"teh speling"}), "the spelling");
  // Aspell's first suggestion is "peruse"; "pursue" is commoner and one vowel swap away.
  ASSERT_EQ(aspell().suggest("persue", 1), std::vector<std::string>{"peruse"});
  EXPECT_EQ(tuned.choose("persue", "persue", nullptr, {"persue"}), "pursue");
}

// Real misspellings (many with several candidates) and words Aspell knows, used over and over.
const std::vector<std::string> kRecycleWords = {
    "teh",      "speling",    "beleive",    "wether",    "recieve",    "definately",
    "seperate", "occured",    "untill",     "wierd",     "freind",     "becuase",
    "tommorow", "acommodate", "neccessary", "goverment", "enviroment", "realy",
    "alot",     "dgo",        "calender",   "prefered",  "begining",   "finaly",
    "writting", "persue",     "the",        "zyxw",      "qwertyuiop"};

TEST(SpellSuggester, ARecycledSpellerSuggestsWhatAUsedOneDoes) {
  const SpellSuggester never("/usr/lib/aspell/en_US.multi", false, 0);
  const SpellSuggester every3("/usr/lib/aspell/en_US.multi", false, 3);
  for (int round = 0; round < 3; ++round) {
    for (const auto& word : kRecycleWords) {
      EXPECT_EQ(every3.suggest(word, SpellSuggester::kCandidates),
                never.suggest(word, SpellSuggester::kCandidates))
          << word << ", round " << round;
    }
  }
  const size_t calls = 3 * kRecycleWords.size();
  EXPECT_EQ(never.spellers_made(), 1u);
  EXPECT_EQ(every3.spellers_made(), 1 + (calls - 1) / 3);  // remade before calls 4, 7, ...
}

TEST(SpellSuggester, TheNoisyChannelChoosesTheSameWithARecycledSpeller) {
  const std::string model = SEQPIPE_SOURCE_DIR "/models/speller-t5/";
  const auto channel = std::make_shared<const NoisyChannel>(
      NoisyChannel::load(model + "word_counts.tsv", model + "edit_counts.tsv"));
  const SpellSuggester never("/usr/lib/aspell/en_US.multi", channel, ChannelWeights{}, 0);
  const SpellSuggester every2("/usr/lib/aspell/en_US.multi", channel, ChannelWeights{}, 2);
  for (int round = 0; round < 2; ++round) {
    for (const auto& word : kRecycleWords)
      EXPECT_EQ(every2.choose(word, word, nullptr, {word}),
                never.choose(word, word, nullptr, {word}))
          << word;
  }
  EXPECT_GT(every2.spellers_made(), kRecycleWords.size() / 2);
}

TEST(SpellSuggester, AMissingDictionaryIsAnError) {
  EXPECT_THROW(SpellSuggester("/nonexistent/en.multi"), std::runtime_error);
}

}  // namespace
}  // namespace seqpipe::postprocessor
