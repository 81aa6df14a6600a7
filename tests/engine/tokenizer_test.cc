// The T5 tokenizer over a spiece.model that seqpipe-mkmodel trains: encode is SentencePiece's
// own encoding plus </s>, decode inverts it and skips special ids as HF's
// decode(skip_special_tokens=True) does, and a bad model file is refused with its path named.
#include "seqpipe/engine/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "file_test_util.h"

namespace seqpipe::engine {
namespace {

using test::engine_error_of;
using test::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const std::vector<std::string> kSentences = {
    "The kettle clicked off just as the rain began to fall.",
    "A quiet fox walked past the old bakery at 6:30 this morning.",
    "Could you bring two loaves of bread, some butter and a jar of honey?",
    "\"We will meet at the bridge,\" he said (and then he left).",
    "Prices rose by 15 percent in 2021; nobody was pleased.",
    "hello world",
};

// One tiny model with spiece.model for the whole suite: training takes a moment.
class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string command = std::string("\"") + SEQPIPE_MKMODEL +
                                "\" --preset tiny --spiece --out \"" + dir_->path().string() +
                                "\" > /dev/null";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    spiece_path_ = dir_->file("spiece.model");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static TempDir* dir_;
  static std::string spiece_path_;
};

TempDir* TokenizerTest::dir_ = nullptr;
std::string TokenizerTest::spiece_path_;

TEST_F(TokenizerTest, HasT5SpecialIds) {
  Tokenizer tokenizer(spiece_path_);
  EXPECT_EQ(tokenizer.pad_id(), 0);
  EXPECT_EQ(tokenizer.eos_id(), 1);
  EXPECT_GT(tokenizer.vocab_size(), 100);
  EXPECT_LE(tokenizer.vocab_size(), 512) << "no more pieces than the tiny model's vocab_size";
}

TEST_F(TokenizerTest, EncodeIsSentencePieceIdsFollowedByEos) {
  Tokenizer tokenizer(spiece_path_);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(spiece_path_).ok());
  for (const std::string& text : kSentences) {
    std::vector<int> want;
    ASSERT_TRUE(sp.Encode(text, &want).ok());
    want.push_back(1);
    EXPECT_EQ(tokenizer.encode(text), want) << text;
  }
  EXPECT_EQ(tokenizer.encode(""), std::vector<int>{1}) << "empty text is eos alone";
}

TEST_F(TokenizerTest, DecodeInvertsEncode) {
  Tokenizer tokenizer(spiece_path_);
  for (const std::string& text : kSentences) {
    const std::vector<int> ids = tokenizer.encode(text);
    EXPECT_EQ(tokenizer.decode(ids), text);
    // As generate() returns them: the decoder start token (pad) first.
    std::vector<int> generated = {0};
    generated.insert(generated.end(), ids.begin(), ids.end());
    EXPECT_EQ(tokenizer.decode(generated), text);
  }
}

TEST_F(TokenizerTest, DecodeSkipsSpecialAndOutOfVocabularyIds) {
  Tokenizer tokenizer(spiece_path_);
  const std::vector<int> hello = tokenizer.encode("hello");
  const std::vector<int> world = tokenizer.encode("world");
  const int vocab = tokenizer.vocab_size();
  std::vector<int> noisy = {0, 2};
  noisy.insert(noisy.end(), hello.begin(), hello.end() - 1);  // without its eos
  noisy.insert(noisy.end(), {1, 0, vocab, 511, 100000, -3, 2});
  noisy.insert(noisy.end(), world.begin(), world.end());
  EXPECT_EQ(tokenizer.decode(noisy), "hello world");
  EXPECT_EQ(tokenizer.decode(std::vector<int>{0, 1, 2, vocab}), "");
  EXPECT_EQ(tokenizer.decode(std::vector<int>{}), "");
}

TEST_F(TokenizerTest, UnknownCharactersEncodeAsUnkThatDecodeDrops) {
  Tokenizer tokenizer(spiece_path_);
  const std::vector<int> ids = tokenizer.encode("snow \xe6\xbc\xa2 fall");  // a CJK character
  EXPECT_NE(std::find(ids.begin(), ids.end(), 2), ids.end()) << "unk id 2 expected";
  const std::string text = tokenizer.decode(ids);
  EXPECT_THAT(text, AllOf(HasSubstr("snow"), HasSubstr("fall"), Not(HasSubstr("\xe6\xbc\xa2")),
                          Not(HasSubstr("\xe2\x81\x87"))));  // SentencePiece's unk surface, U+2047
}

TEST(TokenizerFileTest, MissingModelNamesTheFile) {
  TempDir dir;
  const std::string path = dir.file("spiece.model");
  EXPECT_THAT(engine_error_of([&] { Tokenizer tokenizer(path); }), HasSubstr(path));
}

TEST(TokenizerFileTest, GarbageModelNamesTheFile) {
  TempDir dir;
  const std::string path = dir.file("spiece.model");
  test::write_file(path, "this is not a SentencePiece model\n");
  EXPECT_THAT(engine_error_of([&] { Tokenizer tokenizer(path); }), HasSubstr(path));
  test::write_file(path, "");
  EXPECT_THAT(engine_error_of([&] { Tokenizer tokenizer(path); }), HasSubstr(path));
}

}  // namespace
}  // namespace seqpipe::engine
