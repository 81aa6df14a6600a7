#include "postprocessor/final_words.h"

#include <algorithm>

#include "text/word_alignment.h"

namespace seqpipe::postprocessor {
namespace {

// How many times `word` occurs in `words`.
size_t occurrences(const std::vector<std::string_view>& words, std::string_view word) {
  return static_cast<size_t>(std::count(words.begin(), words.end(), word));
}

// Whether a gap of changed words (input [in_begin, in_end) for output [out_begin, out_end)) can
// only align as it does now, whatever the output adds: no input word of it occurs elsewhere in
// the input or anywhere in the output, and no output word of it occurs in the input. (With the
// input word elsewhere, a longer output could match it there and move the alignment: a model
// looping on "daffodlis galore and daffodlis galore".)
bool fixed_gap(const std::vector<std::string_view>& input,
               const std::vector<std::string_view>& words, const text::AlignedSpan& s) {
  for (size_t k = s.in_begin; k < s.in_end; ++k) {
    if (occurrences(input, input[k]) > 1 || occurrences(words, input[k]) > 0) return false;
  }
  for (size_t k = s.out_begin; k < s.out_end; ++k) {
    if (occurrences(input, words[k]) > 0) return false;
  }
  return true;
}

// How many of the input's first words the alignment with `words` settles within the first
// `decoded` of them. The alignment matches equal words as it meets them, so the words the output
// repeats from the input's start are settled as they are decoded. After a gap (words changed), a
// later output could still make it an insertion, a split or a merge, or move the alignment to a
// later repeat of a word: a gap of words that occur nowhere else (fixed_gap) is settled by a
// repeated word after it that occurs once in the input and in the output; settling stops at any
// other gap.
size_t settled(const std::vector<std::string_view>& input,
               const std::vector<std::string_view>& words, size_t decoded) {
  size_t until = 0;
  bool open = false;  // a gap since the last settled word
  for (const auto& s : text::align_words(input, words)) {
    if (s.same) {
      if (s.out_end > decoded) break;
      const auto word = input[s.in_begin];
      if (open && (occurrences(input, word) > 1 || occurrences(words, word) > 1)) continue;
      until = s.in_end;
      open = false;
    } else if (s.in_end - s.in_begin == s.out_end - s.out_begin && fixed_gap(input, words, s)) {
      open = true;
    } else {
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
  for (const auto& words : alignments)
    until = std::min(until, settled(input, words, decoded_words));
  if (!needs_context) return until;
  for (size_t k = 0; k < until; ++k) {
    bool context = needs_context(input[k]);
    for (const auto& words : alignments) context = context || needs_context(words[k]);
    if (context && k + 2 >= decoded_words) return k;
  }
  return until;
}

}  // namespace seqpipe::postprocessor
