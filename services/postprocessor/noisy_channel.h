#pragma once
// The two halves of a noisy-channel choice among candidate corrections of a misspelled word: how
// common each candidate is (a word-frequency prior) and how likely the typed word is as a
// misspelling of it (an error model). Both are counts read from files next to the model
// (tools/train_speller/channel_data.py writes them): onboard-data's word counts, and how often
// each single-letter edit turned a word into a real misspelling in the training pairs.
// SpellSuggester weighs them with the model's and Aspell's rankings.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace seqpipe::postprocessor {

class NoisyChannel {
 public:
  // Edits: kind 'd' (a letter of the word left out: letters = it), 'i' (a letter typed in),
  // 's' (letters[1] typed for letters[0]), 't' (letters typed swapped), keyed kind + letters.
  NoisyChannel(std::unordered_map<std::string, int64_t> word_counts,
               std::unordered_map<std::string, int64_t> edit_counts);
  // Reads "word<TAB>count" and "kind<TAB>letters<TAB>count" lines ('#' starts a comment line);
  // throws std::runtime_error naming the file that cannot be read, holds no entry or a bad line.
  static NoisyChannel load(const std::string& word_counts_path,
                           const std::string& edit_counts_path);

  // ln(count + 1) of the lower-cased word: 0 for a word the counts lack.
  double log_count(std::string_view word) const;
  // The cheapest way to type `typed` for `word`: each edit costs ln((all edits + 1) / (its count
  // + 1)), a common edit little, an unseen one the most; the same word costs 0.
  double edit_cost(std::string_view word, std::string_view typed) const;

 private:
  double cost(char kind, std::string_view letters) const;

  std::unordered_map<std::string, int64_t> word_counts_;
  std::unordered_map<std::string, double> edit_costs_;
  double unseen_edit_cost_ = 0.0;
};

}  // namespace seqpipe::postprocessor
