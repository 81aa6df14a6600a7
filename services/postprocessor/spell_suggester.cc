#include "postprocessor/spell_suggester.h"

#include <aspell.h>

#include <algorithm>
#include <stdexcept>

#include "text/word_alignment.h"

namespace seqpipe::postprocessor {
namespace {

// The words of `words` in [begin, end), one space apart.
std::string joined(const std::vector<std::string_view>& words, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end; ++k) {
    if (k > begin) out += ' ';
    out += words[k];
  }
  return out;
}

}  // namespace

void SpellSuggester::Delete::operator()(AspellSpeller* speller) const {
  delete_aspell_speller(speller);
}

SpellSuggester::SpellSuggester(const std::string& dictionary,
                               std::shared_ptr<const NoisyChannel> channel,
                               const ChannelWeights& weights, size_t recycle_calls)
    : SpellSuggester(dictionary, true, recycle_calls) {
  channel_ = std::move(channel);
  weights_ = weights;
}

SpellSuggester::SpellSuggester(const std::string& dictionary, bool check_left_words,
                               size_t recycle_calls)
    : dictionary_(dictionary),
      recycle_calls_(recycle_calls),
      speller_(make_speller(dictionary)),
      spellers_made_(1),
      check_left_words_(check_left_words) {}

SpellSuggester::Speller SpellSuggester::make_speller(const std::string& dictionary) {
  AspellConfig* config = new_aspell_config();
  aspell_config_replace(config, "master", dictionary.c_str());
  aspell_config_replace(config, "encoding", "utf-8");
  AspellCanHaveError* made = new_aspell_speller(config);
  delete_aspell_config(config);
  if (aspell_error_number(made) != 0) {
    const std::string message = aspell_error_message(made);
    delete_aspell_can_have_error(made);
    throw std::runtime_error("postprocessor.aspell_dictionary: " + message);
  }
  return Speller(to_aspell_speller(made));
}

bool SpellSuggester::correct(std::string_view word) const {
  return aspell_speller_check(speller_.get(), word.data(), static_cast<int>(word.size())) == 1;
}

std::vector<std::string> SpellSuggester::suggest(std::string_view word, size_t n) const {
  if (recycle_calls_ > 0 && suggest_calls_ == recycle_calls_) {
    speller_ = make_speller(dictionary_);  // should it throw, the old one serves on
    suggest_calls_ = 0;
    ++spellers_made_;
  }
  ++suggest_calls_;
  std::vector<std::string> out;
  const AspellWordList* list =
      aspell_speller_suggest(speller_.get(), word.data(), static_cast<int>(word.size()));
  if (list == nullptr) return out;
  AspellStringEnumeration* it = aspell_word_list_elements(list);
  for (const char* s; out.size() < n && (s = aspell_string_enumeration_next(it)) != nullptr;)
    out.push_back(text::lower_ascii(s));
  delete_aspell_string_enumeration(it);
  return out;
}

std::vector<std::string> SpellSuggester::suggest(std::string_view word, size_t n,
                                                 Suggestions* asked) const {
  if (asked == nullptr || n > kCandidates) return suggest(word, n);
  auto it = asked->find(std::string(word));
  if (it == asked->end()) it = asked->emplace(word, suggest(word, kCandidates)).first;
  const auto& all = it->second;
  return {all.begin(), all.begin() + static_cast<std::ptrdiff_t>(std::min(n, all.size()))};
}

std::string SpellSuggester::rank(std::string_view typed, const std::vector<std::string>& placed,
                                 const KnownWords* known, Suggestions* asked) const {
  struct Candidate {
    std::string word;
    size_t aspell_rank = kAbsent, hypothesis_rank = kAbsent;
  };
  std::vector<Candidate> candidates;
  auto add = [&](std::string word) -> Candidate& {
    const auto it = std::find_if(candidates.begin(), candidates.end(),
                                 [&](const Candidate& c) { return c.word == word; });
    if (it != candidates.end()) return *it;
    return candidates.emplace_back(Candidate{std::move(word)});
  };
  const auto suggestions = suggest(typed, kCandidates, asked);
  for (size_t r = 0; r < suggestions.size(); ++r) {
    auto& c = add(suggestions[r]);  // lower-cased, so "Paris" and "paris" are one
    c.aspell_rank = std::min(c.aspell_rank, r);
  }
  for (size_t k = 0; k < placed.size(); ++k) {
    if (placed[k].empty()) continue;
    auto& c = add(text::lower_ascii(placed[k]));
    c.hypothesis_rank = std::min(c.hypothesis_rank, k);
  }
  const std::string from = text::lower_ascii(typed);
  add(from);
  const auto& w = weights_;
  auto score = [&](const Candidate& c) {
    const bool knows = (known != nullptr && known->contains(c.word)) || correct(c.word);
    const bool same_first = !c.word.empty() && !from.empty() && c.word.front() == from.front();
    const bool same_last = !c.word.empty() && !from.empty() && c.word.back() == from.back();
    return -w.aspell_rank * static_cast<double>(c.aspell_rank) -
           w.hypothesis_rank * static_cast<double>(c.hypothesis_rank) +
           w.log_count * channel_->log_count(c.word) -
           w.edit_cost * channel_->edit_cost(c.word, from) + (knows ? w.known : 0.0) +
           (same_first ? w.first_letter : 0.0) + (c.aspell_rank == 0 ? w.aspell_first : 0.0) +
           (same_last ? w.last_letter : 0.0);
  };
  // The first best wins a tie: Aspell's order, then the hypotheses'.
  const Candidate* best = &candidates.front();
  double best_score = score(*best);
  for (const auto& c : candidates) {
    const double s = score(c);
    if (s > best_score) best = &c, best_score = s;
  }
  return best->word;
}

std::string SpellSuggester::choose(std::string_view input, std::string_view output,
                                   const KnownWords* known,
                                   const std::vector<std::string>& hypotheses,
                                   Suggestions* asked) const {
  const auto a = text::split_words(input);
  const auto b = text::split_words(output);
  // placed[i][k]: hypothesis k's words in place of input word i, where it substitutes word for
  // word (or keeps it) or puts one or more words for input word i alone ("alot" -> "a lot").
  std::vector<std::vector<std::string>> placed;
  if (channel_) {
    std::vector<std::vector<std::string_view>> hypothesis_words;
    if (hypotheses.empty()) hypothesis_words.push_back(b);
    for (const auto& h : hypotheses) hypothesis_words.push_back(text::split_words(h));
    placed.assign(a.size(), std::vector<std::string>(hypothesis_words.size()));
    for (size_t k = 0; k < hypothesis_words.size(); ++k) {
      const auto& words = hypothesis_words[k];
      for (const auto& s : text::align_words(a, words)) {
        const size_t in = s.in_end - s.in_begin, out = s.out_end - s.out_begin;
        if (in == out) {
          for (size_t j = 0; j < in; ++j)
            placed[s.in_begin + j][k] = std::string(words[s.out_begin + j]);
        } else if (in == 1 && out > 0) {
          placed[s.in_begin][k] = joined(words, s.out_begin, s.out_end);
        }
      }
    }
  }
  std::string out;
  auto emit = [&](std::string_view word) {
    if (!out.empty()) out += ' ';
    out += word;
  };
  auto unknown = [&](std::string_view word) {
    return (known == nullptr || !known->contains(word)) && !correct(word);
  };
  // The noisy channel's pick for input word i, which the output fills with `to`.
  auto weigh = [&](size_t i, std::string to) {
    auto candidates = placed[i];
    candidates.push_back(std::move(to));  // the output's words compete too, ranked last
    return rank(a[i], candidates, known, asked);
  };
  for (const auto& s : text::align_words(a, b)) {
    const size_t n = s.in_end - s.in_begin;
    if (n != s.out_end - s.out_begin) {
      // One unknown input word for other words (a split): weighed with them as one candidate.
      if (channel_ && n == 1 && s.out_end > s.out_begin && unknown(a[s.in_begin])) {
        emit(weigh(s.in_begin, joined(b, s.out_begin, s.out_end)));
        continue;
      }
      for (size_t k = s.out_begin; k < s.out_end; ++k) emit(b[k]);
      continue;
    }
    for (size_t k = 0; k < n; ++k) {
      const auto from = a[s.in_begin + k], to = b[s.out_begin + k];
      if ((from == to && !check_left_words_) || !unknown(from)) {
        emit(to);
        continue;
      }
      if (channel_) {
        emit(weigh(s.in_begin + k, std::string(to)));
        continue;
      }
      const auto candidates = suggest(from, kAgreeing, asked);
      const bool agreed = std::find(candidates.begin(), candidates.end(), text::lower_ascii(to)) !=
                          candidates.end();
      emit(candidates.empty() || agreed ? to : std::string_view(candidates.front()));
    }
  }
  return out;
}

}  // namespace seqpipe::postprocessor
