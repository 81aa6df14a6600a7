#pragma once
// Real-word errors by their context: words commonly typed for one another ("then"/"than",
// "their"/"there"/"they're") form confusion sets, and counts of each member's neighbours in the
// training sentences (tools/train_speller/confusion_data.py writes them next to the model) tell
// which member a context wants. A word of a set becomes another member when that member's
// naive-Bayes score, ln(n(c) + 1) + the sum over the word's contexts f of
// ln((n(c, f) + 0.5) / (n(c) + 0.5 V)), beats the word's own by a margin (V: the distinct
// contexts of f's kind). The contexts: the word before, the word after, both, the two before and
// the two after, as far as the text reaches; a context no member was counted with is left out.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace seqpipe::postprocessor {

class ConfusionSets {
 public:
  // Reads "word<TAB>set<TAB>k" lines (the word is in confusion set k) and "word<TAB>context<TAB>
  // count" lines (context "*": all the word's occurrences); throws std::runtime_error naming the
  // file that cannot be read, holds no set or has a bad line.
  static ConfusionSets load(const std::string& path);

  // `text` (lower-case words one space apart, as the model writes) with each word of a set
  // replaced by the member whose score beats it by more than `margin` (nats).
  std::string correct(std::string_view text, double margin) const;
  size_t sets() const { return sets_; }
  // Whether `word` is in a set: its correction depends on the words around it.
  bool contains(std::string_view word) const { return members_.count(std::string(word)) > 0; }

 private:
  using Counts = std::unordered_map<std::string, int64_t>;  // context -> count; "*": all
  double score(const std::string& candidate, const std::vector<std::string>& contexts) const;

  std::unordered_map<std::string, std::vector<std::string>> members_;  // word -> its sets' words
  std::unordered_map<std::string, Counts> counts_;
  std::unordered_map<std::string, double> distinct_;  // context kind -> distinct contexts (V)
  size_t sets_ = 0;
};

}  // namespace seqpipe::postprocessor
