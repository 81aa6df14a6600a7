// ConfusionSets on a small counts file: the context picks the member, the margin holds back a
// weak case, other bytes stay, and a bad file is a clear error.
#include "postprocessor/confusion_sets.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

namespace seqpipe::postprocessor {
namespace {

class ConfusionSetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One file per test: ctest runs the tests of this fixture at the same time.
    path_ = ::testing::TempDir() + "confusion_counts_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".tsv";
    write(
        "then\tset\t0\nthan\tset\t0\n"
        // "than" after "taller" and before "me"; "then" at the start of a clause ("and then").
        "than\t*\t100\nthan\tP:taller\t30\nthan\tN:me\t20\nthan\tPN:taller|me\t10\n"
        "then\t*\t300\nthen\tP:and\t80\nthen\tN:we\t40\nthen\tPN:and|we\t20\n"
        "then\tP:taller\t0\n");
  }
  void TearDown() override { std::remove(path_.c_str()); }
  void write(const std::string& text) { std::ofstream(path_) << text; }

  std::string path_;
};

TEST_F(ConfusionSetsTest, TheContextPicksTheMemberAndOtherBytesStay) {
  const auto sets = ConfusionSets::load(path_);
  EXPECT_EQ(sets.sets(), 1u);
  EXPECT_EQ(sets.correct("he is taller then me", 2.0), "he is taller than me");
  EXPECT_EQ(sets.correct("he is taller than me", 2.0), "he is taller than me");
  EXPECT_EQ(sets.correct("and than we left", 2.0), "and then we left");
  EXPECT_EQ(sets.correct("taller  then\tme", 2.0), "taller  than\tme");
  // Contexts no member was counted with say nothing: the commoner word's prior alone is not
  // enough against a margin.
  EXPECT_EQ(sets.correct("so than", 2.0), "so than");
  EXPECT_EQ(sets.correct("then", 2.0), "then");
  EXPECT_EQ(sets.correct("nothing to do here", 0.0), "nothing to do here");
}

TEST_F(ConfusionSetsTest, AWideMarginKeepsTheWord) {
  const auto sets = ConfusionSets::load(path_);
  EXPECT_EQ(sets.correct("he is taller then me", 50.0), "he is taller then me");
}

TEST_F(ConfusionSetsTest, ABadFileIsAnErrorNamingTheKey) {
  write("then\tset\t0\nthan\t*\tmany\n");
  try {
    ConfusionSets::load(path_);
    FAIL() << "a bad line loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("postprocessor.confusion_counts"), std::string::npos);
  }
  write("then\t*\t300\n");
  EXPECT_THROW(ConfusionSets::load(path_), std::runtime_error);  // no set
  EXPECT_THROW(ConfusionSets::load(path_ + ".missing"), std::runtime_error);
}

}  // namespace
}  // namespace seqpipe::postprocessor
