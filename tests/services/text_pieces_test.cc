// Long texts in pieces: split_text's pieces and join_pieces' exact round trip.
#include "text/text_pieces.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace seqpipe::text {
namespace {

std::vector<std::string> bytes_of(std::string_view text, const std::vector<Piece>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) out.emplace_back(text.substr(p.begin, p.end - p.begin));
  return out;
}

// The pieces' own bytes joined give the text back, byte for byte.
void expect_round_trip(std::string_view text, size_t max_words) {
  const auto pieces = split_text(text, max_words);
  EXPECT_EQ(join_pieces(text, pieces, bytes_of(text, pieces)), text) << text;
}

TEST(TextPieces, AShortTextOrZeroIsOnePieceWithItsWhitespace) {
  EXPECT_EQ(split_text("  teh cat \n", 8), (std::vector<Piece>{{0, 11}}));
  EXPECT_EQ(split_text("", 8), (std::vector<Piece>{{0, 0}}));
  EXPECT_EQ(split_text("a b c d e f g h i j", 0), (std::vector<Piece>{{0, 19}}));
}

TEST(TextPieces, SentencesArePackedWhileTheyFit) {
  const std::string text = "Teh cat sat. It was hapy! Was it? Yes, it was.";
  EXPECT_EQ(bytes_of(text, split_text(text, 5)),
            (std::vector<std::string>{"Teh cat sat.", "It was hapy! Was it?", "Yes, it was."}));
  EXPECT_EQ(bytes_of(text, split_text(text, 7)),
            (std::vector<std::string>{"Teh cat sat. It was hapy!", "Was it? Yes, it was."}));
}

TEST(TextPieces, ALongSentenceIsSplitIntoEqualParts) {
  // 10 words, at most 4 a piece: 3 parts of 3, 3 and 4, not 4, 4 and 2.
  const std::string text = "one two three four five six seven eight nine ten";
  EXPECT_EQ(bytes_of(text, split_text(text, 4)),
            (std::vector<std::string>{"one two three", "four five six", "seven eight nine ten"}));
}

TEST(TextPieces, ClosingQuotesAndLineBreaksEndSentences) {
  const std::string text = "He said \"stop.\" Then he\nleft the room (quietly.) And that was it";
  EXPECT_EQ(bytes_of(text, split_text(text, 5)),
            (std::vector<std::string>{"He said \"stop.\" Then he", "left the room (quietly.)",
                                      "And that was it"}));
}

TEST(TextPieces, RoundTripsExactly) {
  expect_round_trip("  odd \t whitespace\r\n\n between   words. and\fmore\vof it  ", 2);
  expect_round_trip("no sentence end at all just words and words and words", 3);
  expect_round_trip(std::string(5000, 'x') + " tail", 1);  // a single very long word
  expect_round_trip(
      "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u8fd9\u662f\u4e00\u4e2a\u53e5"
      "\u5b50\u3002 \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 "
      "\U0001F600 \u00e9t\u00e9\u2026 fin",
      2);
  for (size_t n = 1; n < 12; ++n) expect_round_trip("A b. C d e f g! H i? J k l m n o p q.", n);
}

TEST(TextPieces, NoPieceIsOverTheLimitAndPiecesHaveNoEdgeWhitespace) {
  const std::string text = "  a b c. d e f g h i j k l m n!\n\n o p q r s t u v w x y z  ";
  const auto pieces = split_text(text, 4);
  for (const auto& piece : bytes_of(text, pieces)) {
    EXPECT_LE(std::count(piece.begin(), piece.end(), ' ') + 1, 4) << piece;
    EXPECT_NE(piece.front(), ' ');
    EXPECT_NE(piece.back(), ' ');
  }
}

TEST(TextPieces, OutputsOfAnyLengthGoInTheirPlaces) {
  const std::string text = "Teh cat.  Sat on teh mat.\n";
  const auto pieces = split_text(text, 2);
  ASSERT_EQ(pieces.size(), 3u);  // "Teh cat.", "Sat on", "teh mat."
  EXPECT_EQ(join_pieces(text, pieces, {"The cat.", "Sat on", "the mat, indeed."}),
            "The cat.  Sat on the mat, indeed.\n");
  EXPECT_THROW(join_pieces(text, pieces, {"one"}), std::invalid_argument);
}

}  // namespace
}  // namespace seqpipe::text
