#pragma once
// Candidates from GNU Aspell for the input words the model may have got wrong. On real
// misspellings Aspell's first suggestion is right more often than the small model's word, and the
// model's word is right more often still when it is among Aspell's first suggestions (it then
// chose in context): models/speller-t5/MODEL_CARD.md has the figures. So for each input word that
// Aspell and the word lists do not know and that the model changed, the model's word stands when
// Aspell suggests it too, else Aspell's first suggestion replaces it. A word the model left is
// left too (a name, a rare word), unless `check_left_words`: then Aspell corrects it as well,
// which fixes more misspellings the model does not see and changes more correct rare words.
//
// With a NoisyChannel the choice is a weighed one instead: for each such word (left or changed),
// the candidates are Aspell's first kCandidates suggestions, the words the beam hypotheses put in
// its place and the word itself, and the best by ChannelWeights wins: Aspell's rank, the
// hypotheses' rank, how common the candidate is and how likely the typed word is as its
// misspelling (the noisy channel), whether the dictionaries know it, whether it is Aspell's
// first suggestion, the same first and last letters.
//
// Aspell 0.60.8's speller keeps memory for every suggestion it makes until it is deleted (about
// 6.5 KB a call: 6.5 MB per 1,000 calls, without bound), so the suggester remakes it after every
// `recycle_calls` suggestions: a fresh speller suggests exactly what the used one did, and
// making one costs ~0.7 ms (docs/PERFORMANCE.md, "Memory over time (soak)"). Not thread-safe:
// one stage thread calls it.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "postprocessor/known_words.h"
#include "postprocessor/noisy_channel.h"

struct AspellSpeller;

namespace seqpipe::postprocessor {

// Each candidate's score is the sum of these weights times its features; a rank a candidate
// lacks counts as kAbsent. The defaults are tuned (tools/train_speller/rerank_tune.py, 2 beams,
// --clean-weight 5) on ../shared/spelling/dev_words.tsv (real misspellings: top-1) and clean
// spans of training sentences (correct words must stay), not on the eval's held-out sentences:
// models/speller-t5/MODEL_CARD.md has the figures.
struct ChannelWeights {
  double aspell_rank = 0.5;      // subtracted per place down Aspell's suggestions
  double hypothesis_rank = 0.5;  // subtracted per place down the beam hypotheses
  double log_count = 0.3;        // ln(word count + 1): the prior
  double edit_cost = 0.4;        // subtracted: the error model
  double known = 2.15;           // added when the word lists or Aspell know the candidate
  double first_letter = 3.0;     // added when it starts as the typed word does
  double aspell_first = 0.2;     // added when it is Aspell's first suggestion
  double last_letter = 1.6;      // added when it ends as the typed word does
};

class SpellSuggester {
 public:
  // Loads an Aspell dictionary (e.g. /usr/lib/aspell/en_US.multi, Debian aspell-en); throws
  // std::runtime_error with Aspell's message when it cannot.
  explicit SpellSuggester(const std::string& dictionary, bool check_left_words = false,
                          size_t recycle_calls = kRecycleCalls);
  // Chooses by the noisy channel and `weights` (see above).
  SpellSuggester(const std::string& dictionary, std::shared_ptr<const NoisyChannel> channel,
                 const ChannelWeights& weights, size_t recycle_calls = kRecycleCalls);

  bool correct(std::string_view word) const;
  // Aspell's first `n` suggestions, lower-cased, best first.
  std::vector<std::string> suggest(std::string_view word, size_t n) const;

  // Aspell's first kCandidates suggestions for each word asked about: a caller that asks about
  // the same words again (a stream's partials, each rewriting the input's words not yet final)
  // keeps them, and Aspell, most of a rewrite's time, is asked once per word.
  using Suggestions = std::unordered_map<std::string, std::vector<std::string>>;

  // The output with the words the model left or made for misspelled input words checked against
  // Aspell's first kAgreeing suggestions, or chosen by the noisy channel (see above) among them,
  // the words `hypotheses` (a beam search's, best first; empty: the output alone) have in their
  // place and the input word. Input words `known` knows are left alone, as are gaps that are not
  // word-for-word substitutions (splits, merges). Words are separated by single spaces.
  // `asked` (optional): suggestions asked for before, which it adds to.
  std::string choose(std::string_view input, std::string_view output, const KnownWords* known,
                     const std::vector<std::string>& hypotheses = {},
                     Suggestions* asked = nullptr) const;

  // How many of Aspell's suggestions the model's word may be among to stand.
  static constexpr size_t kAgreeing = 5;
  // How many of Aspell's suggestions the noisy channel weighs, and the rank of a candidate that
  // is not among them (or among the hypotheses).
  static constexpr size_t kCandidates = 10;
  static constexpr size_t kAbsent = 10;
  // How many suggestions a speller makes before it is remade (0: never): bounds Aspell's growth
  // to a few MB for a negligible cost (see above).
  static constexpr size_t kRecycleCalls = 1000;

  // How many spellers this suggester has made (1 + the recycles).
  size_t spellers_made() const { return spellers_made_; }

 private:
  struct Delete {
    void operator()(AspellSpeller* speller) const;
  };
  // The noisy channel's pick for input word `typed`, whose place the hypotheses fill with
  // `placed` (best first; empty where a hypothesis does not replace the word alone).
  std::string rank(std::string_view typed, const std::vector<std::string>& placed,
                   const KnownWords* known, Suggestions* asked) const;
  // suggest(), from `asked` where it holds the word (and into it where it does not).
  std::vector<std::string> suggest(std::string_view word, size_t n, Suggestions* asked) const;

  using Speller = std::unique_ptr<AspellSpeller, Delete>;
  // A speller for the dictionary; throws std::runtime_error with Aspell's message.
  static Speller make_speller(const std::string& dictionary);

  std::string dictionary_;
  size_t recycle_calls_;
  // Remade in suggest() (see above), which callers see as const.
  mutable Speller speller_;
  mutable size_t suggest_calls_ = 0;  // by the current speller
  mutable size_t spellers_made_ = 0;
  bool check_left_words_;
  std::shared_ptr<const NoisyChannel> channel_;  // null: the kAgreeing rule
  ChannelWeights weights_;
};

}  // namespace seqpipe::postprocessor
