#include "postprocessor/noisy_channel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "postprocessor/counts_file.h"
#include "text/word_alignment.h"

namespace seqpipe::postprocessor {

NoisyChannel::NoisyChannel(std::unordered_map<std::string, int64_t> word_counts,
                           std::unordered_map<std::string, int64_t> edit_counts)
    : word_counts_(std::move(word_counts)) {
  // One more than all edits: the commonest edit still costs more than none.
  double all = 1;
  for (const auto& [edit, n] : edit_counts) all += static_cast<double>(n);
  for (const auto& [edit, n] : edit_counts)
    edit_costs_[edit] = std::log(all / (static_cast<double>(n) + 1.0));
  unseen_edit_cost_ = std::log(all);
}

NoisyChannel NoisyChannel::load(const std::string& word_counts_path,
                                const std::string& edit_counts_path) {
  std::unordered_map<std::string, int64_t> words, edits;
  for (auto& row : read_counts(word_counts_path, 2, "postprocessor.word_counts"))
    words[text::lower_ascii(row[0])] += std::stoll(row[1]);
  for (auto& row : read_counts(edit_counts_path, 3, "postprocessor.edit_counts"))
    edits[row[0] + row[1]] += std::stoll(row[2]);
  return NoisyChannel(std::move(words), std::move(edits));
}

double NoisyChannel::log_count(std::string_view word) const {
  const auto it = word_counts_.find(text::lower_ascii(word));
  return it == word_counts_.end() ? 0.0 : std::log(static_cast<double>(it->second) + 1.0);
}

double NoisyChannel::cost(char kind, std::string_view letters) const {
  std::string key(1, kind);
  key += letters;
  const auto it = edit_costs_.find(key);
  return it == edit_costs_.end() ? unseen_edit_cost_ : it->second;
}

double NoisyChannel::edit_cost(std::string_view word, std::string_view typed) const {
  // Weighted Damerau-Levenshtein (optimal string alignment) over bytes.
  const size_t n = word.size(), m = typed.size();
  std::vector<std::vector<double>> d(n + 1, std::vector<double>(m + 1, 0.0));
  for (size_t i = 1; i <= n; ++i) d[i][0] = d[i - 1][0] + cost('d', word.substr(i - 1, 1));
  for (size_t j = 1; j <= m; ++j) d[0][j] = d[0][j - 1] + cost('i', typed.substr(j - 1, 1));
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const char a = word[i - 1], b = typed[j - 1];
      const std::string swap{a, b};
      double best = std::min(d[i - 1][j] + cost('d', word.substr(i - 1, 1)),
                             d[i][j - 1] + cost('i', typed.substr(j - 1, 1)));
      best = std::min(best, d[i - 1][j - 1] + (a == b ? 0.0 : cost('s', swap)));
      if (i > 1 && j > 1 && a == typed[j - 2] && word[i - 2] == b && a != word[i - 2])
        best = std::min(best, d[i - 2][j - 2] + cost('t', word.substr(i - 2, 2)));
      d[i][j] = best;
    }
  }
  return d[n][m];
}

}  // namespace seqpipe::postprocessor
