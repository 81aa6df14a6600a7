#include "postprocessor/spell_suggester.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

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

TEST(SpellSuggester, AMissingDictionaryIsAnError) {
  EXPECT_THROW(SpellSuggester("/nonexistent/en.multi"), std::runtime_error);
}

}  // namespace
}  // namespace seqpipe::postprocessor
