#pragma once
// A guard against "corrections" of correct words: the model's output is aligned word by word
// with its input, and where the model changed, dropped or merged input words that are all in a
// word list, those input words are kept. A spelling corrector for search queries is judged by
// what it breaks as much as by what it fixes, and a word list knows more rare correct words
// (names, technical terms) than a small model does. Real-word errors ("wether" for "weather")
// are then left alone too, unless the model is sure: when nearly all of a beam search's
// hypotheses change a known word, the change stands (measured in models/speller-t5/MODEL_CARD.md).
// Dropped apostrophes are the exception ("cant" -> "can't" passes).
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace seqpipe::postprocessor {

class KnownWords {
 public:
  // Reads the word lists (one word a line, compared ASCII-lower-cased). `paths` is a
  // ':'-separated list, as postprocessor.known_words; throws std::runtime_error naming the file
  // that cannot be read or holds no word.
  static KnownWords load(std::string_view paths);
  explicit KnownWords(const std::vector<std::string>& words);

  bool contains(std::string_view word) const;
  // True when the text has words and the lists know every one.
  bool all_known(std::string_view text) const;
  size_t size() const { return words_.size(); }

  // The output with changed known input words restored; words are separated by single spaces.
  // The two word sequences are aligned on their longest common subsequence; a gap between
  // aligned words with as many words on both sides is resolved word by word, another gap (a
  // split, merge or drop) keeps the input words when all of them are known. An apostrophe the
  // model puts back ("cant" -> "can't") is not a change of word. A known input word that at
  // least `change_votes` (> 0) of the `hypotheses` (a beam search's, the output among them)
  // change in a substitution is the model's confident correction: the output's word stands.
  std::string guard(std::string_view input, std::string_view output,
                    const std::vector<std::string>& hypotheses = {}, int change_votes = 0) const;

 private:
  std::unordered_set<std::string> words_;
};

}  // namespace seqpipe::postprocessor
