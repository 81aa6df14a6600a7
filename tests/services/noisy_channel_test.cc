#include "postprocessor/noisy_channel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <stdexcept>
#include <string>

namespace seqpipe::postprocessor {
namespace {

// 100 edits in all (costs are ln(101 / (count + 1))): "e" left out 59 times, "ie" swapped 19 times,
// "a" typed for "e" 9 times.
NoisyChannel channel() {
  return NoisyChannel({{"the", 1000}, {"thee", 9}},
                      {{"de", 59}, {"tie", 19}, {"sea", 9}, {"ix", 13}});
}

TEST(NoisyChannel, ACommonEditCostsLittleAndAnUnseenOneTheMost) {
  const auto c = channel();
  EXPECT_DOUBLE_EQ(c.edit_cost("spelling", "spelling"), 0.0);
  EXPECT_DOUBLE_EQ(c.edit_cost("there", "thre"), std::log(101.0 / 60.0));       // "e" left out
  EXPECT_DOUBLE_EQ(c.edit_cost("believe", "beleive"), std::log(101.0 / 20.0));  // "ie" swapped
  EXPECT_DOUBLE_EQ(c.edit_cost("met", "mat"), std::log(101.0 / 10.0));          // "a" typed for "e"
  EXPECT_DOUBLE_EQ(c.edit_cost("cat", "cut"), std::log(101.0));  // "u" for "a": never seen
  // Two edits cost their sum, and the cheapest path wins.
  EXPECT_DOUBLE_EQ(c.edit_cost("there", "thr"), 2 * std::log(101.0 / 60.0));
  EXPECT_LT(c.edit_cost("there", "thre"), c.edit_cost("there", "thera"));
}

TEST(NoisyChannel, LogCountIsTheLowerCasedWordsPriorAndZeroForAnUnknownWord) {
  const auto c = channel();
  EXPECT_DOUBLE_EQ(c.log_count("the"), std::log(1001.0));
  EXPECT_DOUBLE_EQ(c.log_count("The"), std::log(1001.0));
  EXPECT_DOUBLE_EQ(c.log_count("teh"), 0.0);
  EXPECT_GT(c.log_count("the"), c.log_count("thee"));
}

TEST(NoisyChannel, LoadsCountFilesAndRejectsBadOnes) {
  const std::string words = testing::TempDir() + "channel_words.tsv",
                    edits = testing::TempDir() + "channel_edits.tsv",
                    bad = testing::TempDir() + "channel_bad.tsv";
  std::ofstream(words) << "# word<TAB>count\nThe\t1000\nthe\t1\nthee\t9\n";
  std::ofstream(edits) << "# kind<TAB>letters<TAB>count\nd\te\t59\nt\tie\t19\ns\tea\t9\ni\tx\t13\n";
  std::ofstream(bad) << "the\tmany\n";
  const auto c = NoisyChannel::load(words, edits);
  EXPECT_DOUBLE_EQ(c.log_count("the"), std::log(1002.0));  // "The" and "the" summed
  EXPECT_DOUBLE_EQ(c.edit_cost("there", "thre"), std::log(101.0 / 60.0));
  EXPECT_THROW(NoisyChannel::load(words, "/nonexistent/edits.tsv"), std::runtime_error);
  EXPECT_THROW(NoisyChannel::load(bad, edits), std::runtime_error);
  EXPECT_THROW(NoisyChannel::load(words, words), std::runtime_error);  // 2 fields, not 3
}

}  // namespace
}  // namespace seqpipe::postprocessor
