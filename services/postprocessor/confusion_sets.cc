#include "postprocessor/confusion_sets.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include "postprocessor/counts_file.h"
#include "text/word_alignment.h"

namespace seqpipe::postprocessor {
namespace {

constexpr double kAlpha = 0.5;  // additive smoothing of a context's count
constexpr const char* kKey = "postprocessor.confusion_counts";

// The contexts of words[i] inside `words`: "P:prev", "N:next", "PN:prev|next", "PP:prev2|prev",
// "NN:next|next2" (confusion_data.py's contexts()).
std::vector<std::string> contexts_of(const std::vector<std::string_view>& words, size_t i) {
  std::vector<std::string> out;
  auto join = [](std::string_view kind, std::string_view a, std::string_view b = {}) {
    std::string s(kind);
    s += ':';
    s += a;
    if (!b.empty()) {
      s += '|';
      s += b;
    }
    return s;
  };
  const bool before = i >= 1, after = i + 1 < words.size();
  if (before) out.push_back(join("P", words[i - 1]));
  if (after) out.push_back(join("N", words[i + 1]));
  if (before && after) out.push_back(join("PN", words[i - 1], words[i + 1]));
  if (i >= 2) out.push_back(join("PP", words[i - 2], words[i - 1]));
  if (i + 2 < words.size()) out.push_back(join("NN", words[i + 1], words[i + 2]));
  return out;
}

std::string_view kind_of(std::string_view context) {
  return context.substr(0, context.find(':'));
}

}  // namespace

ConfusionSets ConfusionSets::load(const std::string& path) {
  ConfusionSets c;
  std::map<std::string, std::vector<std::string>> sets;  // k -> its words
  std::set<std::string> contexts;
  for (auto& row : read_counts(path, 3, kKey)) {
    if (row[1] == "set") {
      sets[row[2]].push_back(row[0]);
    } else {
      if (row[1] != "*" && contexts.insert(row[1]).second)
        c.distinct_[std::string(kind_of(row[1]))] += 1;
      c.counts_[row[0]][row[1]] += std::stoll(row[2]);
    }
  }
  if (sets.empty()) throw std::runtime_error(std::string(kKey) + ": '" + path + "' holds no set");
  for (const auto& [k, words] : sets) {
    for (const auto& w : words) {
      auto& members = c.members_[w];
      members.insert(members.end(), words.begin(), words.end());
    }
  }
  for (auto& [w, members] : c.members_) {  // sorted and unique: the first best member wins
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
  }
  c.sets_ = sets.size();
  return c;
}

double ConfusionSets::score(const std::string& candidate,
                            const std::vector<std::string>& contexts) const {
  static const Counts kNone;
  const auto it = counts_.find(candidate);
  const Counts& counts = it == counts_.end() ? kNone : it->second;
  auto count = [&](const std::string& context) {
    const auto c = counts.find(context);
    return c == counts.end() ? 0.0 : static_cast<double>(c->second);
  };
  const double n = count("*");
  double s = std::log(n + 1.0);
  for (const auto& context : contexts) {
    const auto v = distinct_.find(std::string(kind_of(context)));
    const double distinct = v == distinct_.end() ? 1.0 : std::max(1.0, v->second);
    s += std::log((count(context) + kAlpha) / (n + kAlpha * distinct));
  }
  return s;
}

std::string ConfusionSets::correct(std::string_view text, double margin) const {
  const std::vector<std::string_view> words = text::split_words(text);
  std::string out;  // text with the replacements, every other byte kept
  size_t from = 0;  // next byte of text to copy
  for (size_t i = 0; i < words.size(); ++i) {
    const auto set = members_.find(std::string(words[i]));
    if (set == members_.end()) continue;
    // The word's contexts that some member was counted with: the others say nothing.
    std::vector<std::string> contexts;
    for (auto& context : contexts_of(words, i)) {
      const bool counted = std::any_of(set->second.begin(), set->second.end(), [&](const auto& m) {
        const auto c = counts_.find(m);
        return c != counts_.end() && c->second.count(context) > 0;
      });
      if (counted) contexts.push_back(std::move(context));
    }
    const std::string& own = set->first;
    double best_score = score(own, contexts) + margin;
    const std::string* best = &own;
    for (const auto& member : set->second) {
      if (member == own) continue;
      const double s = score(member, contexts);
      if (s > best_score) {
        best_score = s;
        best = &member;
      }
    }
    if (best == &own) continue;
    const auto at = static_cast<size_t>(words[i].data() - text.data());
    out.append(text.substr(from, at - from));
    out += *best;
    from = at + words[i].size();
  }
  if (from == 0) return std::string(text);
  out.append(text.substr(from));
  return out;
}

}  // namespace seqpipe::postprocessor
