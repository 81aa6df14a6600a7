#include "text/text_pieces.h"

#include <array>
#include <stdexcept>

namespace seqpipe::text {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Whether a word ends a sentence: . ! ? or an ellipsis (ASCII or CJK), before closing quotes and
// brackets ("end.)" and "end.\u201d" too).
bool ends_sentence(std::string_view word) {
  constexpr std::string_view kClosing = "\"')]}";
  constexpr std::array<std::string_view, 3> kClosingUtf8 = {"\u201d", "\u2019", "\u00bb"};
  constexpr std::array<std::string_view, 4> kEndsUtf8 = {"\u2026", "\u3002", "\uff01", "\uff1f"};
  for (bool more = true; more && !word.empty();) {
    more = false;
    if (kClosing.find(word.back()) != std::string_view::npos) {
      word.remove_suffix(1);
      more = true;
    }
    for (std::string_view c : kClosingUtf8) {
      if (word.ends_with(c)) {
        word.remove_suffix(c.size());
        more = true;
      }
    }
  }
  if (word.empty()) return false;
  if (word.back() == '.' || word.back() == '!' || word.back() == '?') return true;
  for (std::string_view e : kEndsUtf8)
    if (word.ends_with(e)) return true;
  return false;
}

}  // namespace

std::vector<Piece> split_text(std::string_view text, size_t max_words) {
  std::vector<Piece> words;
  for (size_t i = 0; i < text.size();) {
    while (i < text.size() && is_space(text[i])) ++i;
    if (i == text.size()) break;
    const size_t begin = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    words.push_back({begin, i});
  }
  if (max_words == 0 || words.size() <= max_words) return {{0, text.size()}};

  // Sentences: [first word, end word) ranges.
  std::vector<std::pair<size_t, size_t>> sentences;
  size_t first = 0;
  for (size_t k = 0; k < words.size(); ++k) {
    const bool last = k + 1 == words.size();
    const bool line_break =
        !last && text.substr(words[k].end, words[k + 1].begin - words[k].end).find('\n') !=
                     std::string_view::npos;
    if (last || line_break ||
        ends_sentence(text.substr(words[k].begin, words[k].end - words[k].begin))) {
      sentences.emplace_back(first, k + 1);
      first = k + 1;
    }
  }

  std::vector<Piece> pieces;
  auto add = [&](size_t from, size_t to) {
    pieces.push_back({words[from].begin, words[to - 1].end});
  };
  size_t open = 0,
         open_end = 0;  // sentences packed into the piece not added yet: words [open, open_end)
  for (const auto& [from, to] : sentences) {
    if (open_end > open && to - open > max_words) {
      add(open, open_end);
      open = open_end;
    }
    if (to - from <= max_words) {
      open_end = to;
      continue;
    }
    // Longer than a piece: parts of equal length, at most max_words each.
    const size_t n = to - from, parts = (n + max_words - 1) / max_words;
    for (size_t p = 0; p < parts; ++p) add(from + n * p / parts, from + n * (p + 1) / parts);
    open = open_end = to;
  }
  if (open_end > open) add(open, open_end);
  return pieces;
}

std::string join_pieces(std::string_view text, const std::vector<Piece>& pieces,
                        const std::vector<std::string>& outputs) {
  if (outputs.size() != pieces.size())
    throw std::invalid_argument("join_pieces: " + std::to_string(outputs.size()) + " outputs for " +
                                std::to_string(pieces.size()) + " pieces");
  std::string joined;
  size_t from = 0;  // next byte of text to copy
  for (size_t k = 0; k < pieces.size(); ++k) {
    joined.append(text.substr(from, pieces[k].begin - from));
    joined += outputs[k];
    from = pieces[k].end;
  }
  joined.append(text.substr(from));
  return joined;
}

std::string joined_so_far(std::string_view text, const std::vector<Piece>& pieces,
                          const std::vector<std::string>& outputs, size_t done) {
  if (outputs.size() != pieces.size() || done > pieces.size())
    throw std::invalid_argument("joined_so_far: " + std::to_string(outputs.size()) +
                                " outputs for " + std::to_string(pieces.size()) + " pieces");
  if (done == pieces.size()) return join_pieces(text, pieces, outputs);
  std::string joined;
  size_t from = 0;  // next byte of text to copy
  for (size_t k = 0; k <= done; ++k) {
    joined.append(text.substr(from, pieces[k].begin - from));
    joined += outputs[k];
    from = pieces[k].end;
  }
  return joined;
}

}  // namespace seqpipe::text
