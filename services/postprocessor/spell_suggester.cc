#include "postprocessor/spell_suggester.h"

#include <aspell.h>

#include <algorithm>
#include <stdexcept>

#include "text/word_alignment.h"

namespace seqpipe::postprocessor {
namespace {

std::string lower(std::string_view word) {
  std::string out(word);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) {
    return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  });
  return out;
}

}  // namespace

void SpellSuggester::Delete::operator()(AspellSpeller* speller) const {
  delete_aspell_speller(speller);
}

SpellSuggester::SpellSuggester(const std::string& dictionary, bool check_left_words)
    : check_left_words_(check_left_words) {
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
  speller_.reset(to_aspell_speller(made));
}

bool SpellSuggester::correct(std::string_view word) const {
  return aspell_speller_check(speller_.get(), word.data(), static_cast<int>(word.size())) == 1;
}

std::vector<std::string> SpellSuggester::suggest(std::string_view word, size_t n) const {
  std::vector<std::string> out;
  const AspellWordList* list =
      aspell_speller_suggest(speller_.get(), word.data(), static_cast<int>(word.size()));
  if (list == nullptr) return out;
  AspellStringEnumeration* it = aspell_word_list_elements(list);
  for (const char* s; out.size() < n && (s = aspell_string_enumeration_next(it)) != nullptr;)
    out.push_back(lower(s));
  delete_aspell_string_enumeration(it);
  return out;
}

std::string SpellSuggester::choose(std::string_view input, std::string_view output,
                                   const KnownWords* known) const {
  const auto a = text::split_words(input);
  const auto b = text::split_words(output);
  std::string out;
  auto emit = [&](std::string_view word) {
    if (!out.empty()) out += ' ';
    out += word;
  };
  for (const auto& s : text::align_words(a, b)) {
    const size_t n = s.in_end - s.in_begin;
    if (n != s.out_end - s.out_begin) {
      for (size_t k = s.out_begin; k < s.out_end; ++k) emit(b[k]);
      continue;
    }
    for (size_t k = 0; k < n; ++k) {
      const auto from = a[s.in_begin + k], to = b[s.out_begin + k];
      if ((from == to && !check_left_words_) || (known != nullptr && known->contains(from)) ||
          correct(from)) {
        emit(to);
        continue;
      }
      const auto candidates = suggest(from, kAgreeing);
      const bool agreed =
          std::find(candidates.begin(), candidates.end(), lower(to)) != candidates.end();
      emit(candidates.empty() || agreed ? to : std::string_view(candidates.front()));
    }
  }
  return out;
}

}  // namespace seqpipe::postprocessor
