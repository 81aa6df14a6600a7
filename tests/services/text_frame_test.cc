#include "text/text_frame.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "text/word_alignment.h"

namespace seqpipe::text {
namespace {

// What the model is given, and the text its correction gives back.
struct Case {
  std::string text, model_text, output, restored;
};

TEST(TextFrame, TheModelSeesPlainWordsLowerCasedAndTheirCorrectionTakesTheirPlace) {
  const std::vector<Case> cases = {
      {"teh speling", "teh speling", "the spelling", "the spelling"},
      {"Teh Speling", "teh speling", "the spelling", "The Spelling"},  // title case: its style
      {"TEH SPELING", "teh speling", "the spelling", "THE SPELLING"},  // all capitals: its style
      {"I cant beleive it", "i cant beleive it", "i can't believe it", "I can't believe it"},
      {"recieve teh pakage at 5pm", "recieve teh pakage at", "receive the package at",
       "receive the package at 5pm"},
      {"I cant beleive its 2026!", "i cant beleive its", "i can't believe it's",
       "I can't believe it's 2026!"},
      {"(Teh) speling, \"wierd\"...", "teh speling wierd", "the spelling weird",
       "(The) spelling, \"weird\"..."},
      {"my iPhone brocken", "my brocken", "my broken", "my iPhone broken"},
      {"see https://exmaple.com/teh and a@b.org teh", "see and teh", "see and the",
       "see https://exmaple.com/teh and a@b.org the"},
      {"call foo_bar() or x.y teh", "call or teh", "call or the", "call foo_bar() or x.y the"},
      {"héllo wörld 😀 teh", "teh", "the", "héllo wörld 😀 the"},
      {"  teh\tspeling \n", "teh speling", "the spelling", "  the\tspelling \n"},
      {"“teh” speling…", "teh speling", "the spelling", "“the” spelling…"},
      {"", "", "", ""},
      {"2026 !", "", "the", "2026 !"},  // nothing for the model: its words have no place
  };
  for (const auto& c : cases) {
    const TextFrame frame(c.text);
    EXPECT_EQ(frame.model_text(), c.model_text) << c.text;
    EXPECT_EQ(frame.restore(c.output), c.restored) << c.text;
    EXPECT_EQ(frame.restore(c.model_text), c.text) << c.text;  // no change, no change
  }
}

TEST(TextFrame, NamesAndTermsTheModelDoesNotKnowAreKeptAsTyped) {
  // (text, what the model made of its words, the reply): the model sees every plain word, but
  // all-caps words, capitalised words inside a sentence and the user's words are not put back.
  const std::vector<std::array<std::string, 3>> cases = {
      {"sign teh NDA", "sign the nada", "sign the NDA"},
      {"send JSON from teh SDK CLI", "send jason from the sk clip", "send JSON from the SDK CLI"},
      {"I met Kowalski and Siobhan", "i met kawasaki and sibhan", "I met Kowalski and Siobhan"},
      {"Kowalski met Siobhan", "kawasaki met sibhan", "Kawasaki met Siobhan"},  // begins the text
      {"We met. Siobhan sang", "we met sibhan sang", "We met. Sibhan sang"},    // a new sentence
      {"Done!\nSiobhan (\"Siobhan\") sang", "done sibhan sibhan sang",
       "Done!\nSibhan (\"Siobhan\") sang"},
      {"run nginx or Nginx", "run ngnex or ngnex", "run nginx or Nginx"},  // user words, any case
      {"an mp3 for the iPhone", "an for the", "an mp3 for the iPhone"},    // not plain words
      {"the NDA ALOT", "the nda a lot", "the NDA ALOT"},   // no split of a kept word
      {"SIGN TEH NDA", "sign the nada", "SIGN THE NADA"},  // all in capitals: its style
  };
  const auto user_word = [](std::string_view w) { return w == "nginx"; };
  for (const auto& [text, output, restored] : cases) {
    const TextFrame frame(text, user_word);
    EXPECT_EQ(frame.restore(output), restored) << text;
    EXPECT_EQ(frame.restore(frame.model_text()), text) << text;
  }
  EXPECT_EQ(TextFrame("run nginx").restore("run ngnex"), "run ngnex");  // no list: corrected
}

TEST(TextFrame, SplitsAndMergesKeepTheCaseAndMergeOnlyAcrossWhitespace) {
  EXPECT_EQ(TextFrame("Alot of").restore("a lot of"), "A lot of");
  EXPECT_EQ(TextFrame("ALOT MORE").restore("a lot more"), "A LOT MORE");
  EXPECT_EQ(TextFrame("Alott").restore("a lot"), "A lot");  // one letter fixed as well
  EXPECT_EQ(TextFrame("Some  thing new").restore("something new"), "Something new");
  EXPECT_EQ(TextFrame("any way.").restore("anyway"), "anyway.");
  EXPECT_EQ(TextFrame("some, thing new").restore("something new"), "some, thing new");
}

TEST(TextFrame, WhatCannotBePlacedLeavesTheOriginalWords) {
  EXPECT_EQ(TextFrame("Teh big dog").restore("the"), "Teh big dog");      // rewritten as one
  EXPECT_EQ(TextFrame("Teh big dog").restore("the big"), "The big dog");  // a dropped word
  EXPECT_EQ(TextFrame("teh dog").restore("the big dog"), "teh dog");      // an inserted word
  EXPECT_EQ(TextFrame("ab").restore("a bc"), "ab");  // a split adding a letter to two
  EXPECT_EQ(TextFrame("some thing").restore("somebody"), "some thing");    // too many edits
  EXPECT_EQ(TextFrame("teh dog").restore("the d0g"), "the dog");           // not a lower-case word
  EXPECT_EQ(TextFrame("teh dog").restore("the \xe2\x81\x87"), "the dog");  // unk
  EXPECT_EQ(TextFrame("a b c d").restore("w x y"), "a b c d");             // 4 words rewritten as 3
}

TEST(TextFrame, ALongTextGivesTheModelTheMostWordsThatFitAndKeepsTheRest) {
  const TextFrame frame("Teh speling, teh speling 42 teh");
  auto bytes = [](std::string_view t) { return t.size(); };  // a token a byte
  EXPECT_EQ(frame.words_that_fit(bytes, 100), 5u);
  EXPECT_EQ(frame.words_that_fit(bytes, 15), 3u);  // "teh speling teh": 15
  EXPECT_EQ(frame.words_that_fit(bytes, 14), 2u);
  EXPECT_EQ(frame.words_that_fit(bytes, 2), 0u);
  EXPECT_EQ(frame.model_text(3), "teh speling teh");
  EXPECT_EQ(frame.model_text(0), "");
  EXPECT_EQ(frame.restore("the spelling the", 3), "The spelling, the speling 42 teh");
}

TEST(WordAlignment, MatchesAndGapsInOrder) {
  const auto spans = align_words(split_words("teh big dog"), split_words("the big dogs barked"));
  const std::vector<AlignedSpan> want = {
      {0, 1, 0, 1, false}, {1, 2, 1, 2, true}, {2, 3, 2, 4, false}};
  EXPECT_EQ(spans, want);
  EXPECT_TRUE(align_words({}, {}).empty());
  EXPECT_EQ(split_words(" a\t b\n"), (std::vector<std::string_view>{"a", "b"}));
}

}  // namespace
}  // namespace seqpipe::text
