#include "postprocessor/final_words.h"

#include <algorithm>

#include "text/word_alignment.h"

namespace seqpipe::postprocessor {
namespace {

// How many of the input's first words the alignment with `words` settles within the first
// `decoded` of them: up to the last word the output repeats before the first gap that is not one
// to one. A gap is settled only by a repeated word after it (until then the output could still
// insert, split or merge words there).
size_t settled(const std::vector<std::string_view>& input,
               const std::vector<std::string_view>& words, size_t decoded) {
  size_t until = 0;
  for (const auto& s : text::align_words(input, words)) {
    if (s.same) {
      if (s.out_end > decoded) break;
      until = s.in_end;
    } else if (s.in_end - s.in_begin != s.out_end - s.out_begin) {
      break;
    }
  }
  return until;
}

}  // namespace

size_t final_words(const std::vector<std::string_view>& input,
                   const std::vector<std::vector<std::string_view>>& alignments,
                   size_t decoded_words,
                   const std::function<bool(std::string_view)>& needs_context) {
  size_t until = std::min(input.size(), decoded_words);
  for (const auto& words : alignments) until = std::min(until, settled(input, words, decoded_words));
  if (!needs_context) return until;
  for (size_t k = 0; k < until; ++k) {
    bool context = needs_context(input[k]);
    for (const auto& words : alignments) context = context || needs_context(words[k]);
    if (context && k + 2 >= decoded_words) return k;
  }
  return until;
}

}  // namespace seqpipe::postprocessor
