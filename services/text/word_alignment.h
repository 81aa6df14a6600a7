#pragma once
// Word-by-word alignment of a text with its correction, shared by the postprocessor's known-words
// guard and by TextFrame, which puts the corrected words back into the original text.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace seqpipe::text {

// The whitespace-separated words of a text (views into it).
std::vector<std::string_view> split_words(std::string_view text);

// `word` with its ASCII letters lower-cased (how word lists, Aspell and word counts are looked up).
std::string lower_ascii(std::string_view word);

// Input words [in_begin, in_end) became output words [out_begin, out_end). `same`: one input word
// and the same output word; otherwise a gap between aligned words (a substitution when both sides
// have as many words; a split, merge, insertion or drop otherwise).
struct AlignedSpan {
  size_t in_begin = 0, in_end = 0, out_begin = 0, out_end = 0;
  bool same = false;
  bool operator==(const AlignedSpan&) const = default;
};

// The two word sequences aligned on their longest common subsequence, in order; empty gaps are
// left out. Quadratic in words: inputs are bounded by the model's token limit.
std::vector<AlignedSpan> align_words(const std::vector<std::string_view>& input,
                                     const std::vector<std::string_view>& output);

}  // namespace seqpipe::text
