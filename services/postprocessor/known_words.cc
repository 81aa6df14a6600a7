#include "postprocessor/known_words.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

namespace seqpipe::postprocessor {
namespace {

std::string lower(std::string_view word) {
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
    while (i < text.size() &&
           (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
      ++i;
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t' && text[j] != '\n' &&
           text[j] != '\r')
      ++j;
    if (j > i) words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

// "can't" for "cant", "it's" for "its": the same letters, an apostrophe put back. Word lists
// know "cant" and "wont" as words, but in queries they are nearly always dropped apostrophes,
// and the model decides from the context.
bool apostrophe_restored(std::string_view input, std::string_view output) {
  if (output.size() <= input.size()) return false;
  std::string letters;
  for (char c : output) {
    if (c != '\'') letters += c;
  }
  return letters == input;
}

}  // namespace

KnownWords::KnownWords(const std::vector<std::string>& words) {
  for (const auto& w : words) words_.insert(lower(w));
}

KnownWords KnownWords::load(std::string_view paths) {
  std::vector<std::string> words;
  size_t start = 0;
  while (start <= paths.size()) {
    const size_t end = std::min(paths.find(':', start), paths.size());
    const std::string path(paths.substr(start, end - start));
    std::ifstream in(path);
    if (!in)
      throw std::runtime_error("postprocessor.known_words: cannot read word list '" + path + "'");
    const size_t before = words.size();
    for (std::string line; std::getline(in, line);) {
      for (const auto word : split_words(line)) words.emplace_back(word);
    }
    if (words.size() == before)
      throw std::runtime_error("postprocessor.known_words: '" + path + "' holds no word");
    start = end + 1;
  }
  return KnownWords(words);
}

bool KnownWords::contains(std::string_view word) const {
  return words_.count(lower(word)) > 0;
}

bool KnownWords::all_known(std::string_view text) const {
  const auto words = split_words(text);
  return !words.empty() &&
         std::all_of(words.begin(), words.end(), [&](std::string_view w) { return contains(w); });
}

std::string KnownWords::guard(std::string_view input, std::string_view output) const {
  const auto a = split_words(input);
  const auto b = split_words(output);
  const size_t n = a.size(), m = b.size();
  // lcs[i][j]: the longest common subsequence of a[i..] and b[j..] (inputs are short: <= a few
  // hundred words, the model's token limit).
  std::vector<uint32_t> lcs((n + 1) * (m + 1), 0);
  auto at = [&](size_t i, size_t j) -> uint32_t& { return lcs[i * (m + 1) + j]; };
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;)
      at(i, j) = a[i] == b[j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
  }
  std::string out;
  auto emit = [&](std::string_view word) {
    if (!out.empty()) out += ' ';
    out += word;
  };
  // Walks the alignment; each gap (a[i0..i), b[j0..j)) between matched words is resolved word
  // by word when both sides have as many words (substitutions: a known input word stays), else
  // as a whole (splits, merges, drops): the input words if there are some and all are known,
  // else the model's words.
  size_t i = 0, j = 0, i0 = 0, j0 = 0;
  auto close_gap = [&] {
    if (i - i0 == j - j0) {
      for (size_t k = 0; k < i - i0; ++k) {
        const bool keep = contains(a[i0 + k]) && !apostrophe_restored(a[i0 + k], b[j0 + k]);
        emit(keep ? a[i0 + k] : b[j0 + k]);
      }
      return;
    }
    const bool keep = i > i0 && std::all_of(a.begin() + static_cast<std::ptrdiff_t>(i0),
                                            a.begin() + static_cast<std::ptrdiff_t>(i),
                                            [&](std::string_view w) { return contains(w); });
    if (keep) {
      for (size_t k = i0; k < i; ++k) emit(a[k]);
    } else {
      for (size_t k = j0; k < j; ++k) emit(b[k]);
    }
  };
  while (i < n && j < m) {
    if (a[i] == b[j]) {
      close_gap();
      emit(a[i]);
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
  return out;
}

}  // namespace seqpipe::postprocessor
