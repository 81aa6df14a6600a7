#pragma once
// What a model trained on lower-case words sees of a text, and how its correction goes back into
// the text. The frame keeps the text's plain words (ASCII letters with inner apostrophes, all
// lower-case, all upper-case or capitalised) and carries everything else exactly: whitespace,
// punctuation around words, numbers, URLs, e-mail addresses, code-like tokens, mixed-case words
// ("iPhone"), accented and non-Latin words, emoji. The model gets the plain words lower-cased,
// one space apart; its output is aligned with them word by word and each corrected word takes
// the case of the word it replaces ("Teh" -> "The", "SPELING" -> "SPELLING"). Where the model's
// words cannot be placed (a gap it dropped or rewrote, a merge across punctuation, anything but
// lower-case letters), the original words stay: the frame never breaks what it does not
// understand. The tokenizer and the postprocessor each build the frame from the input text.
//
// Some plain words are names or terms the model does not know, and its "correction" would damage
// them (NDA -> NADA, Kowalski -> Kawasaki): they are kept as typed. The model still sees them
// (its context stays the sentence the user wrote), but whatever it makes of them is not put back:
//  - all-caps words (NDA, JSON);
//  - capitalised words that do not begin a sentence (Kowalski, Siobhan): a sentence begins with
//    the text, after a line break, and after a word ending in '.', '!', '?' or an ellipsis;
//    unless the text's style sets the case: two or more words, all in capitals ("TEH SPELING")
//    or all capitalised ("Teh Speling"), are corrected like any other;
//  - the user's words (postprocessor.user_words: nginx), in any case.
// Words with digits or inner capitals (mp3, iPhone) are not plain words: the model never sees them.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace seqpipe::text {

class TextFrame {
 public:
  // `is_user_word` (optional) is asked about each plain word, lower-cased: true keeps it as typed.
  using WordPredicate = std::function<bool(std::string_view)>;
  explicit TextFrame(std::string_view text, const WordPredicate& is_user_word = {});

  // The plain words, lower-cased, separated by single spaces (empty when there are none).
  const std::string& model_text() const { return model_text_; }
  // The first `words` of them.
  std::string model_text(size_t words) const;
  size_t word_count() const { return words_.size(); }

  // How many words, from the first, the model can take: the most whose model_text(n) is at most
  // `max_tokens` long by `token_count`. A longer text is corrected in its first part, and the
  // rest passes through; the tokenizer and the postprocessor compute the same cut.
  size_t words_that_fit(const std::function<size_t(std::string_view)>& token_count,
                        size_t max_tokens) const;

  // The original text with the model's correction of model_text(seen_words) put in.
  std::string restore(std::string_view output) const { return restore(output, words_.size()); }
  std::string restore(std::string_view output, size_t seen_words) const {
    return restore(output, seen_words, nullptr);
  }
  // The same, with where each word (or its replacement) begins in the result put in
  // `word_begins` (one per word): a stream cuts the text there.
  std::string restore(std::string_view output, size_t seen_words,
                      std::vector<size_t>* word_begins) const;

 private:
  enum class Case { kLower, kCapitalised, kUpper };
  struct Word {
    size_t begin = 0, end = 0;  // the word's bytes in text_
    Case letter_case = Case::kLower;
    bool kept = false;  // the model's change of it is not put back
  };
  std::string text_;
  std::vector<Word> words_;
  std::string model_text_;
  std::vector<size_t> model_ends_;  // where each word ends in model_text_

  // Whether only whitespace separates word k from word k + 1 (a merge may join them).
  bool spaced(size_t k) const;
  // Whether the token starting at byte `token_begin` begins a sentence.
  bool begins_sentence(size_t token_begin) const;
  // Marks the words kept as typed (see above).
  void keep_names_and_terms(const std::vector<bool>& sentence_start,
                            const WordPredicate& is_user_word);
  static std::string with_case(std::string_view word, Case letter_case);
};

}  // namespace seqpipe::text
