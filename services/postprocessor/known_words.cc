#include "postprocessor/known_words.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "text/word_alignment.h"

namespace seqpipe::postprocessor {
namespace {

using text::split_words;

// "can't" for "cant", "it's" for "its": the same letters, an apostrophe put back. Word lists
// know "cant" and "wont" as words, but in queries they are nearly always dropped apostrophes,
// and the model decides from the context. A possessive for a longer plural ("gods" -> "god's",
// "fortunes" -> "fortune's") is another word, not a dropped apostrophe: the plural stays.
bool apostrophe_restored(std::string_view input, std::string_view output) {
  if (output.size() <= input.size()) return false;
  if (input.size() > 3 && output.ends_with("'s")) return false;
  std::string letters;
  for (char c : output) {
    if (c != '\'') letters += c;
  }
  return letters == input;
}

}  // namespace

KnownWords::KnownWords(const std::vector<std::string>& words) {
  for (const auto& w : words) words_.insert(text::lower_ascii(w));
}

KnownWords KnownWords::load(std::string_view paths, std::string_view key) {
  std::vector<std::string> words;
  size_t start = 0;
  while (start <= paths.size()) {
    const size_t end = std::min(paths.find(':', start), paths.size());
    const std::string path(paths.substr(start, end - start));
    std::ifstream in(path);
    if (!in) throw std::runtime_error(std::string(key) + ": cannot read word list '" + path + "'");
    const size_t before = words.size();
    for (std::string line; std::getline(in, line);) {
      for (const auto word : split_words(line)) words.emplace_back(word);
    }
    if (words.size() == before)
      throw std::runtime_error(std::string(key) + ": '" + path + "' holds no word");
    start = end + 1;
  }
  return KnownWords(words);
}

bool KnownWords::contains(std::string_view word) const {
  return words_.count(text::lower_ascii(word)) > 0;
}

bool KnownWords::all_known(std::string_view text) const {
  const auto words = split_words(text);
  return !words.empty() &&
         std::all_of(words.begin(), words.end(), [&](std::string_view w) { return contains(w); });
}

std::string KnownWords::guard(std::string_view input, std::string_view output,
                              const std::vector<std::string>& hypotheses,
                              const std::vector<float>& scores, const SureChange& sure) const {
  const auto a = split_words(input);
  const auto b = split_words(output);
  // How many hypotheses change each input word (leave it out of their aligned words), and the
  // best score of those that keep it.
  std::vector<int> changed_by(a.size(), 0);
  std::vector<double> best_keeping(a.size(), -std::numeric_limits<double>::infinity());
  for (size_t k = 0; k < hypotheses.size(); ++k) {
    std::vector<bool> kept(a.size(), false);
    for (const auto& s : text::align_words(a, split_words(hypotheses[k]))) {
      if (s.same) kept[s.in_begin] = true;
    }
    for (size_t i = 0; i < a.size(); ++i) {
      changed_by[i] += kept[i] ? 0 : 1;
      if (kept[i] && k < scores.size())
        best_keeping[i] = std::max<double>(best_keeping[i], scores[k]);
    }
  }
  // The output's own score: it is one of the hypotheses (a pick among them), else the best.
  const auto picked = std::find(hypotheses.begin(), hypotheses.end(), output);
  const size_t at =
      picked == hypotheses.end() ? 0 : static_cast<size_t>(picked - hypotheses.begin());
  const bool margins =
      sure.margin > 0 && hypotheses.size() >= 2 && scores.size() == hypotheses.size();
  auto is_sure = [&](size_t i) {
    if (sure.votes > 0 && static_cast<int>(hypotheses.size()) >= sure.votes &&
        changed_by[i] >= sure.votes)
      return true;
    // With no hypothesis keeping the word there is no margin to measure: two beams that both
    // change a correct rare word are common (measured in models/speller-t5/MODEL_CARD.md).
    return margins && std::isfinite(best_keeping[i]) && scores[at] - best_keeping[i] >= sure.margin;
  };
  std::string out;
  auto emit = [&](std::string_view word) {
    if (!out.empty()) out += ' ';
    out += word;
  };
  // A gap between aligned words is resolved word by word when both sides have as many words
  // (substitutions: a known input word stays unless enough hypotheses change it), else as a
  // whole (splits, merges, drops): the input words if there are some and all are known, else the
  // model's words.
  for (const auto& s : text::align_words(a, b)) {
    const size_t in = s.in_end - s.in_begin, out_words = s.out_end - s.out_begin;
    if (in == out_words) {
      for (size_t k = 0; k < in; ++k) {
        const auto from = a[s.in_begin + k], to = b[s.out_begin + k];
        emit(contains(from) && !apostrophe_restored(from, to) && !is_sure(s.in_begin + k) ? from
                                                                                          : to);
      }
      continue;
    }
    const bool keep = in > 0 && std::all_of(a.begin() + static_cast<std::ptrdiff_t>(s.in_begin),
                                            a.begin() + static_cast<std::ptrdiff_t>(s.in_end),
                                            [&](std::string_view w) { return contains(w); });
    if (keep) {
      for (size_t k = s.in_begin; k < s.in_end; ++k) emit(a[k]);
    } else {
      for (size_t k = s.out_begin; k < s.out_end; ++k) emit(b[k]);
    }
  }
  return out;
}

}  // namespace seqpipe::postprocessor
