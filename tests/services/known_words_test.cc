#include "postprocessor/known_words.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

namespace seqpipe::postprocessor {
namespace {

const KnownWords kWords({"the", "spelling", "wether", "whether", "paris", "is", "a", "can't", "any",
                         "way", "cant", "its", "gods"});

TEST(KnownWords, ModelCorrectionsOfUnknownWordsPass) {
  EXPECT_EQ(kWords.guard("teh speling", "the spelling"), "the spelling");
  EXPECT_EQ(kWords.guard("cant", "can't"), "can't");  // an apostrophe put back: "cant" is known
  EXPECT_EQ(kWords.guard("its the", "it's the"), "it's the");
  EXPECT_EQ(kWords.guard("its", "bits"), "its");  // a known word otherwise changed stays
  EXPECT_EQ(kWords.guard("the gods", "the god's"), "the gods");  // a plural is not a possessive
}

TEST(KnownWords, ChangedKnownWordsAreRestored) {
  EXPECT_EQ(kWords.guard("teh wether", "the whether"), "the wether");  // wether: a known word
  EXPECT_EQ(kWords.guard("teh wether speling", "the weather spelling"), "the wether spelling");
  EXPECT_EQ(kWords.guard("Paris is", "parish is"), "Paris is");  // looked up lower-cased
  EXPECT_EQ(kWords.guard("a the", "the"), "a the");              // a dropped known word
  EXPECT_EQ(kWords.guard("any way", "anyway"), "any way");       // a merge of known words
}

TEST(KnownWords, AKnownWordEnoughHypothesesChangeIsChanged) {
  const std::vector<std::string> sure = {"the weather is", "the weather was", "a weather is"};
  EXPECT_EQ(kWords.guard("teh wether is", "the weather is", sure, {}, {.votes = 3}),
            "the weather is");
  EXPECT_EQ(kWords.guard("teh wether is", "the weather is", sure, {}, {.votes = 0}),
            "the wether is");  // off
  // "wether" kept by one hypothesis of three: 2 votes, 3 needed.
  const std::vector<std::string> unsure = {"the weather is", "the wether is", "a weather is"};
  EXPECT_EQ(kWords.guard("teh wether is", "the weather is", unsure, {}, {.votes = 3}),
            "the wether is");
  EXPECT_EQ(kWords.guard("teh wether is", "the weather is", unsure, {}, {.votes = 2}),
            "the weather is");
  // Fewer hypotheses than votes (greedy): known words stay.
  EXPECT_EQ(kWords.guard("teh wether", "the weather", {"the weather"}, {}, {.votes = 3}),
            "the wether");
  // Votes count per word: "is" changed by none stays, though "wether" changes.
  EXPECT_EQ(kWords.guard("teh wether is", "the weather it", sure, {}, {.votes = 3}),
            "the weather is");
}

TEST(KnownWords, AKnownWordTheBestHypothesisChangesByAMarginIsChanged) {
  const std::vector<std::string> beams = {"the weather is", "the wether is"};
  const SureChange margin{.margin = 0.2};
  // The output's score is 0.3 above the hypothesis that keeps "wether": the change stands.
  EXPECT_EQ(kWords.guard("teh wether is", "the weather is", beams, {-0.1f, -0.4f}, margin),
            "the weather is");
  // 0.1 above: below the margin, "wether" stays.
  EXPECT_EQ(kWords.guard("teh wether is", "the weather is", beams, {-0.3f, -0.4f}, margin),
            "the wether is");
  // Off (margin 0), or without scores: stays.
  EXPECT_EQ(kWords.guard("teh wether is", "the weather is", beams, {-0.1f, -0.4f}, {}),
            "the wether is");
  EXPECT_EQ(kWords.guard("teh wether is", "the weather is", beams, {}, margin), "the wether is");
  // No hypothesis keeps it: no margin to measure, it stays; so with a lone (greedy) hypothesis.
  EXPECT_EQ(
      kWords.guard("teh wether", "the weather", {"the weather", "a weather"}, {-1.f, -2.f}, margin),
      "the wether");
  EXPECT_EQ(kWords.guard("teh wether", "the weather", {"the weather"}, {-0.01f}, margin),
            "the wether");
  // The output picked among the hypotheses (the first made of known words) brings its score.
  EXPECT_EQ(kWords.guard("teh wether is", "the weather is",
                         {"the weather iz", "the wether is", "the weather is"},
                         {-0.1f, -0.3f, -0.35f}, margin),
            "the wether is");
}

TEST(KnownWords, AGapWithAnUnknownWordTakesTheModelsWords) {
  EXPECT_EQ(kWords.guard("wether speling", "weather spelling is"),
            "weather spelling is");  // 2 vs 3 words
  EXPECT_EQ(kWords.guard("the speling", "the spelling is"),
            "the spelling is");                             // an inserted word stays
  EXPECT_EQ(kWords.guard("anyway", "any way"), "any way");  // a split of an unknown word
}

TEST(KnownWords, EdgeCases) {
  EXPECT_EQ(kWords.guard("", "the"), "the");
  EXPECT_EQ(kWords.guard("the", ""), "the");
  EXPECT_EQ(kWords.guard("  the   spelling ", "the spelling"), "the spelling");
  EXPECT_EQ(KnownWords({}).guard("teh", "the"), "the");
}

TEST(KnownWords, LoadsColonSeparatedListsAndNamesTheFileAtFault) {
  const std::string a = testing::TempDir() + "known_a.txt", b = testing::TempDir() + "known_b.txt";
  std::ofstream(a) << "Colour\ncolor\n";
  std::ofstream(b) << "theatre\n";
  const KnownWords words = KnownWords::load(a + ":" + b);
  EXPECT_EQ(words.size(), 3u);
  EXPECT_TRUE(words.contains("colour"));
  EXPECT_TRUE(words.contains("THEATRE"));
  EXPECT_FALSE(words.contains("theater"));
  try {
    KnownWords::load(a + ":/nonexistent/words");
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "postprocessor.known_words: cannot read word list '/nonexistent/words'"),
              std::string::npos);
  }
  const std::string empty = testing::TempDir() + "known_empty.txt";
  std::ofstream(empty) << "\n";
  EXPECT_THROW(KnownWords::load(empty), std::runtime_error);
  std::remove(a.c_str());
  std::remove(b.c_str());
  std::remove(empty.c_str());
}

}  // namespace
}  // namespace seqpipe::postprocessor
