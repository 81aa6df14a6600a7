#include "text/text_frame.h"

#include <algorithm>
#include <array>
#include <optional>

#include "seqpipe/config/edit_distance.h"
#include "text/word_alignment.h"

namespace seqpipe::text {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_lower(char c) {
  return c >= 'a' && c <= 'z';
}
bool is_upper(char c) {
  return c >= 'A' && c <= 'Z';
}
bool is_letter(char c) {
  return is_lower(c) || is_upper(c);
}
char to_lower(char c) {
  return is_upper(c) ? static_cast<char>(c - 'A' + 'a') : c;
}
char to_upper(char c) {
  return is_lower(c) ? static_cast<char>(c - 'a' + 'A') : c;
}

// Punctuation that may open or close a word and is carried around it ("(teh", "speling,"):
// ASCII characters, and a few UTF-8 quotes, marks and the ellipsis.
constexpr std::string_view kOpening = "\"'([{<";
constexpr std::string_view kClosing = ".,;:!?\"')]}>";
constexpr std::array<std::string_view, 5> kOpeningUtf8 = {"\u201c", "\u2018", "\u00ab", "\u00bf",
                                                          "\u00a1"};
constexpr std::array<std::string_view, 4> kClosingUtf8 = {"\u201d", "\u2019", "\u00bb", "\u2026"};

// Bytes of opening punctuation at the front of `token`.
size_t opening_length(std::string_view token) {
  size_t n = 0;
  for (;;) {
    const std::string_view rest = token.substr(n);
    if (!rest.empty() && kOpening.find(rest.front()) != std::string_view::npos) {
      ++n;
      continue;
    }
    const auto p = std::find_if(kOpeningUtf8.begin(), kOpeningUtf8.end(),
                                [&](std::string_view p) { return rest.starts_with(p); });
    if (p == kOpeningUtf8.end()) return n;
    n += p->size();
  }
}

// Bytes of closing punctuation at the end of `token`.
size_t closing_length(std::string_view token) {
  size_t n = 0;
  for (;;) {
    const std::string_view rest = token.substr(0, token.size() - n);
    if (!rest.empty() && kClosing.find(rest.back()) != std::string_view::npos) {
      ++n;
      continue;
    }
    const auto p = std::find_if(kClosingUtf8.begin(), kClosingUtf8.end(),
                                [&](std::string_view p) { return rest.ends_with(p); });
    if (p == kClosingUtf8.end()) return n;
    n += p->size();
  }
}

// Letters with apostrophes inside ("can't"), nothing else.
bool plain_word(std::string_view w) {
  if (w.empty() || !is_letter(w.front()) || !is_letter(w.back())) return false;
  for (size_t i = 0; i < w.size(); ++i) {
    if (is_letter(w[i])) continue;
    if (w[i] != '\'' || !is_letter(w[i + 1])) return false;  // one apostrophe between letters
  }
  return true;
}

}  // namespace

TextFrame::TextFrame(std::string_view text, const WordPredicate& is_user_word) : text_(text) {
  std::vector<bool> sentence_start;
  size_t i = 0;
  while (i < text_.size()) {
    while (i < text_.size() && is_space(text_[i])) ++i;
    size_t end = i;
    while (end < text_.size() && !is_space(text_[end])) ++end;
    std::string_view token = std::string_view(text_).substr(i, end - i);
    const size_t open = opening_length(token);
    const size_t close = closing_length(token.substr(open));
    const std::string_view core = token.substr(open, token.size() - open - close);
    if (plain_word(core)) {
      size_t lower = 0, upper = 0;
      for (char c : core) {
        lower += is_lower(c);
        upper += is_upper(c);
      }
      std::optional<Case> letter_case;
      if (upper == 0)
        letter_case = Case::kLower;
      else if (lower == 0 && upper > 1)
        letter_case = Case::kUpper;
      else if (is_upper(core.front()) && upper == 1)
        letter_case = Case::kCapitalised;
      if (letter_case) {  // mixed case ("iPhone", "McDonald") is carried as it is
        const size_t begin = i + open;
        words_.push_back({begin, begin + core.size(), *letter_case});
        sentence_start.push_back(begins_sentence(i));
        if (!model_text_.empty()) model_text_ += ' ';
        for (char c : core) model_text_ += to_lower(c);
        model_ends_.push_back(model_text_.size());
      }
    }
    i = end;
  }
  keep_names_and_terms(sentence_start, is_user_word);
}

bool TextFrame::begins_sentence(size_t token_begin) const {
  size_t p = token_begin;
  while (p > 0 && is_space(text_[p - 1])) {
    if (text_[p - 1] == '\n') return true;
    --p;
  }
  if (p == 0) return true;
  // The previous token's end, closing quotes and brackets aside ("said." Then; (done.) Then).
  std::string_view before = std::string_view(text_).substr(0, p);
  for (;;) {
    if (!before.empty() &&
        std::string_view("\"')]}>").find(before.back()) != std::string_view::npos) {
      before.remove_suffix(1);
    } else if (before.ends_with("\u201d") || before.ends_with("\u2019") ||
               before.ends_with("\u00bb")) {
      before.remove_suffix(before.ends_with("\u00bb") ? 2 : 3);
    } else {
      break;
    }
  }
  return before.ends_with('.') || before.ends_with('!') || before.ends_with('?') ||
         before.ends_with("\u2026");
}

void TextFrame::keep_names_and_terms(const std::vector<bool>& sentence_start,
                                     const WordPredicate& is_user_word) {
  // A text all in capitals or in title case: the case is the text's style, not a name's.
  auto all_words = [&](Case c) {
    return words_.size() > 1 && std::all_of(words_.begin(), words_.end(),
                                            [c](const Word& w) { return w.letter_case == c; });
  };
  const bool styled = all_words(Case::kUpper) || all_words(Case::kCapitalised);
  for (size_t k = 0; k < words_.size(); ++k) {
    Word& w = words_[k];
    const size_t model_begin = k == 0 ? 0 : model_ends_[k - 1] + 1;
    const std::string_view lower =
        std::string_view(model_text_).substr(model_begin, model_ends_[k] - model_begin);
    w.kept = (!styled && w.letter_case == Case::kUpper) ||
             (!styled && w.letter_case == Case::kCapitalised && !sentence_start[k]) ||
             (is_user_word && is_user_word(lower));
  }
}

bool TextFrame::spaced(size_t k) const {
  return std::all_of(text_.begin() + static_cast<std::ptrdiff_t>(words_[k].end),
                     text_.begin() + static_cast<std::ptrdiff_t>(words_[k + 1].begin), is_space);
}

std::string TextFrame::with_case(std::string_view word, Case letter_case) {
  std::string out(word);
  if (letter_case == Case::kUpper) {
    std::transform(out.begin(), out.end(), out.begin(), to_upper);
  } else if (letter_case == Case::kCapitalised) {
    const auto first = std::find_if(out.begin(), out.end(), is_letter);
    if (first != out.end()) *first = to_upper(*first);
  }
  return out;
}

std::string TextFrame::model_text(size_t words) const {
  return words == 0 ? std::string()
                    : model_text_.substr(0, model_ends_[std::min(words, model_ends_.size()) - 1]);
}

size_t TextFrame::words_that_fit(const std::function<size_t(std::string_view)>& token_count,
                                 size_t max_tokens) const {
  size_t n = words_.size();
  size_t tokens = token_count(model_text_);
  // Down in proportion to the excess, one word at least each time.
  while (tokens > max_tokens && n > 0) {
    n = std::min(n - 1, n * max_tokens / tokens);
    tokens = token_count(model_text(n));
  }
  // The step may have cut more than needed: grow back to the most that fit.
  while (n < words_.size() && token_count(model_text(n + 1)) <= max_tokens) ++n;
  return n;
}

std::string TextFrame::restore(std::string_view output, size_t seen_words,
                               std::vector<size_t>* word_begins) const {
  const std::string seen = model_text(seen_words);
  const auto in = split_words(seen);
  const auto out = split_words(output);
  // A replacement for each word (nullopt: the original stays), and words a merge removed.
  std::vector<std::optional<std::string>> replacement(words_.size());
  std::vector<bool> removed(words_.size(), false);
  auto lower_case_word = [](std::string_view w) {
    return plain_word(w) && std::none_of(w.begin(), w.end(), is_upper);
  };
  // The words [begin, end) of `words` joined by `separator`.
  auto join = [](const std::vector<std::string_view>& words, size_t begin, size_t end,
                 std::string_view separator) {
    std::string joined;
    for (size_t k = begin; k < end; ++k) {
      if (k > begin) joined += separator;
      joined += words[k];
    }
    return joined;
  };
  for (const auto& s : align_words(in, out)) {
    if (s.same) continue;
    const size_t n_in = s.in_end - s.in_begin, n_out = s.out_end - s.out_begin;
    if (n_in == n_out) {  // substitutions, word by word
      for (size_t k = 0; k < n_in; ++k) {
        if (lower_case_word(out[s.out_begin + k]) && !words_[s.in_begin + k].kept)
          replacement[s.in_begin + k] =
              with_case(out[s.out_begin + k], words_[s.in_begin + k].letter_case);
      }
      continue;
    }
    // A split or a merge moves spaces and fixes a letter or two ("alot" -> "a lot", "any way" ->
    // "anyway", "alott" -> "a lot"): at most one edit per four letters, two in all; a merge joins
    // words only whitespace separates. Any other gap (the model dropped, inserted or rewrote
    // words): the original words stay.
    if (n_in == 0 || n_out == 0 || (n_in > 1 && n_out > 1) || n_in > 3 || n_out > 3) continue;
    const std::string letters = join(in, s.in_begin, s.in_end, "");
    const size_t edits = edit_distance(letters, join(out, s.out_begin, s.out_end, ""));
    if (edits > 2 || edits * 4 > letters.size()) continue;
    if (!std::all_of(out.begin() + static_cast<std::ptrdiff_t>(s.out_begin),
                     out.begin() + static_cast<std::ptrdiff_t>(s.out_end), lower_case_word))
      continue;
    bool adjacent = true;
    for (size_t k = s.in_begin; k + 1 < s.in_end; ++k) adjacent = adjacent && spaced(k);
    const bool kept = std::any_of(words_.begin() + static_cast<std::ptrdiff_t>(s.in_begin),
                                  words_.begin() + static_cast<std::ptrdiff_t>(s.in_end),
                                  [](const Word& w) { return w.kept; });
    if (!adjacent || kept) continue;
    // "Alot" -> "A lot": the case of the first word replaced.
    replacement[s.in_begin] =
        with_case(join(out, s.out_begin, s.out_end, " "), words_[s.in_begin].letter_case);
    for (size_t k = s.in_begin + 1; k < s.in_end; ++k) removed[k] = true;
  }
  std::string result;
  size_t from = 0;  // next byte of text_ to copy
  if (word_begins) word_begins->clear();
  for (size_t k = 0; k < words_.size(); ++k) {
    if (removed[k]) {  // merged into the word before: its leading whitespace goes too
      if (word_begins) word_begins->push_back(result.size());
      from = words_[k].end;
      continue;
    }
    result.append(text_, from, words_[k].begin - from);
    if (word_begins) word_begins->push_back(result.size());
    if (replacement[k]) {
      result += *replacement[k];
    } else {
      result.append(text_, words_[k].begin, words_[k].end - words_[k].begin);
    }
    from = words_[k].end;
  }
  result.append(text_, from);
  return result;
}

}  // namespace seqpipe::text
