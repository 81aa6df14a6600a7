#pragma once
// A guard against "corrections" of correct words: the model's output is aligned word by word
// with its input, and where the model changed, dropped or merged input words that are all in a
// word list, those input words are kept. A spelling corrector for search queries is judged by
// what it breaks as much as by what it fixes, and a word list knows more rare correct words
// (names, technical terms) than a small model does. Real-word errors ("wether" for "weather")
// are then left alone too, unless the model is sure: when nearly all of a beam search's
// hypotheses change a known word, or the best scores well above every hypothesis that keeps it,
// the change stands (measured in models/speller-t5/MODEL_CARD.md).
// Dropped apostrophes are the exception ("cant" -> "can't" passes), but not a possessive for a
// plural of more than 3 letters ("gods" -> "god's": the plural stays).
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace seqpipe::postprocessor {

// When the model may change a known input word after all: it is sure of the change.
struct SureChange {
  int votes = 0;        // at least this many hypotheses change the word (0: off)
  double margin = 0.0;  // the output's score is at least this much above that of every hypothesis
                        // that keeps the word, of which there is one or more (0: off)
};

class KnownWords {
 public:
  // Reads the word lists (one word a line, compared ASCII-lower-cased). `paths` is a
  // ':'-separated list, as postprocessor.known_words; throws std::runtime_error naming the config
  // `key` and the file that cannot be read or holds no word.
  static KnownWords load(std::string_view paths,
                         std::string_view key = "postprocessor.known_words");
  explicit KnownWords(const std::vector<std::string>& words);

  bool contains(std::string_view word) const;
  // True when the text has words and the lists know every one.
  bool all_known(std::string_view text) const;
  size_t size() const { return words_.size(); }

  // The output with changed known input words restored; words are separated by single spaces.
  // The two word sequences are aligned on their longest common subsequence; a gap between
  // aligned words with as many words on both sides is resolved word by word, another gap (a
  // split, merge or drop) keeps the input words when all of them are known. An apostrophe the
  // model puts back ("cant" -> "can't", "its" -> "it's"; not "gods" -> "god's") is not a change
  // of word. A known input word that the `hypotheses` (a beam search's, the output among them,
  // with their `scores`: HF sequences_scores, one each) change as `sure` says in a substitution
  // is the model's confident correction: the output's word stands.
  std::string guard(std::string_view input, std::string_view output,
                    const std::vector<std::string>& hypotheses = {},
                    const std::vector<float>& scores = {}, const SureChange& sure = {}) const;

 private:
  std::unordered_set<std::string> words_;
};

}  // namespace seqpipe::postprocessor
