#pragma once
// Candidates from GNU Aspell for the input words the model may have got wrong. On real
// misspellings Aspell's first suggestion is right more often than the small model's word, and the
// model's word is right more often still when it is among Aspell's first suggestions (it then
// chose in context): models/speller-t5/MODEL_CARD.md has the figures. So for each input word that
// Aspell and the word lists do not know and that the model changed, the model's word stands when
// Aspell suggests it too, else Aspell's first suggestion replaces it. A word the model left is
// left too (a name, a rare word), unless `check_left_words`: then Aspell corrects it as well,
// which fixes more misspellings the model does not see and changes more correct rare words.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "postprocessor/known_words.h"

struct AspellSpeller;

namespace seqpipe::postprocessor {

class SpellSuggester {
 public:
  // Loads an Aspell dictionary (e.g. /usr/lib/aspell/en_US.multi, Debian aspell-en); throws
  // std::runtime_error with Aspell's message when it cannot.
  explicit SpellSuggester(const std::string& dictionary, bool check_left_words = false);

  bool correct(std::string_view word) const;
  // Aspell's first `n` suggestions, lower-cased, best first.
  std::vector<std::string> suggest(std::string_view word, size_t n) const;

  // The output with the words the model left or made for misspelled input words checked against
  // Aspell's first kAgreeing suggestions (see above). Input words `known` knows are left alone,
  // as are gaps that are not word-for-word substitutions (splits, merges). Words are separated
  // by single spaces.
  std::string choose(std::string_view input, std::string_view output,
                     const KnownWords* known) const;

  // How many of Aspell's suggestions the model's word may be among to stand.
  static constexpr size_t kAgreeing = 5;

 private:
  struct Delete {
    void operator()(AspellSpeller* speller) const;
  };
  std::unique_ptr<AspellSpeller, Delete> speller_;
  bool check_left_words_;
};

}  // namespace seqpipe::postprocessor
