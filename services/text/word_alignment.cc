#include "text/word_alignment.h"

#include <algorithm>
#include <cstdint>

namespace seqpipe::text {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

std::string lower_ascii(std::string_view word) {
  std::string out(word);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) {
    return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  });
  return out;
}

std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    size_t j = i;
    while (j < text.size() && !is_space(text[j])) ++j;
    if (j > i) words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

std::vector<AlignedSpan> align_words(const std::vector<std::string_view>& a,
                                     const std::vector<std::string_view>& b) {
  const size_t n = a.size(), m = b.size();
  // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
  std::vector<uint32_t> lcs((n + 1) * (m + 1), 0);
  auto at = [&](size_t i, size_t j) -> uint32_t& { return lcs[i * (m + 1) + j]; };
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;)
      at(i, j) = a[i] == b[j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
  }
  std::vector<AlignedSpan> spans;
  size_t i = 0, j = 0, i0 = 0, j0 = 0;
  auto close_gap = [&] {
    if (i > i0 || j > j0) spans.push_back({i0, i, j0, j, false});
  };
  while (i < n && j < m) {
    if (a[i] == b[j]) {
      close_gap();
      spans.push_back({i, i + 1, j, j + 1, true});
      i0 = ++i;
      j0 = ++j;
    } else if (at(i + 1, j) >= at(i, j + 1)) {
      ++i;
    } else {
      ++j;
    }
  }
  i = n;
  j = m;
  close_gap();
  return spans;
}

}  // namespace seqpipe::text
