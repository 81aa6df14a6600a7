#pragma once
// The generation options that the client protocol and the engine share, and the values each one
// accepts: written here once. protocol::GenerateParams (what a request asks for) extends
// SearchOptions and engine::decoding_options turns it into what a sequence decodes with; the
// client protocol's option table (common/protocol/src/generate_options.cc) takes each row's range
// from `range::`, and engine::DecodingOptions::validate checks the same ranges. Header-only,
// below both.
#include <cstdint>
#include <limits>
#include <optional>

#include "seqpipe/generation/limits.h"

namespace seqpipe::generation {

// An upper bound by name instead of a number: a limit the server configures (the protocol's
// Limits: max_new_tokens cap, max_beams, priority_levels; the engine, which configures none,
// takes the hard limits kMaxNewTokens and kMaxBeams), or int64's largest (no double holds it).
enum class UpperBound { kNone, kMaxNewTokens, kMaxBeams, kPriorityLevels, kInt64Max };

// The values accepted. Integers: [lo, hi]. Floats: finite, above lo (or at it when !lo_open),
// at most hi. Booleans: none.
struct OptionRange {
  double lo = 0;
  double hi = 0;
  bool lo_open = false;
  UpperBound upper = UpperBound::kNone;  // replaces hi when set
};

// Whether `value` lies in `r`, where `upper` stands for r's named upper bound (if it has one).
// Finiteness is the caller's: a range's infinite bounds only say "no bound".
constexpr bool in_range(const OptionRange& r, double value, double upper) {
  const double hi = r.upper == UpperBound::kNone ? r.hi : upper;
  const bool above_lo = r.lo_open ? value > r.lo : value >= r.lo;
  return above_lo && value <= hi;
}

namespace range {
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr OptionRange kMaxNewTokens{.lo = 1, .upper = UpperBound::kMaxNewTokens};
inline constexpr OptionRange kNumBeams{.lo = 1, .upper = UpperBound::kMaxBeams};
inline constexpr OptionRange kLengthPenalty{.lo = -kInf, .hi = kInf};
// At most max_new_tokens as well: a rule between two options, checked beside the ranges.
inline constexpr OptionRange kMinNewTokens{.lo = 0, .upper = UpperBound::kMaxNewTokens};
// At most num_beams as well (checked beside the ranges).
inline constexpr OptionRange kNumReturnSequences{.lo = 1, .hi = kMaxBeams};
inline constexpr OptionRange kRepetitionPenalty{.lo = 0, .hi = kInf, .lo_open = true};
inline constexpr OptionRange kNoRepeatNgramSize{.lo = 0, .hi = kMaxNoRepeatNgramSize};
inline constexpr OptionRange kTemperature{.lo = 0, .hi = kInf, .lo_open = true};
inline constexpr OptionRange kTopK{.lo = 0, .hi = std::numeric_limits<int32_t>::max()};
inline constexpr OptionRange kTopP{.lo = 0, .hi = 1, .lo_open = true};
inline constexpr OptionRange kSeed{.lo = 0, .upper = UpperBound::kInt64Max};
}  // namespace range

// The options of one sequence's search, as a request gives them and the engine takes them
// (HuggingFace generate()'s names and defaults). Ranges: `range::` above.
struct SearchOptions {
  // Tokens generated after the start token, eos included.
  int max_new_tokens = kDefaultMaxNewTokens;
  // 1: greedy; > 1: beam search, holding slot_cost(num_beams) cache slots.
  int num_beams = 1;
  float length_penalty = 1.0f;  // beam score = sum of log-probs / length^length_penalty
  int min_new_tokens = 0;       // eos is suppressed until this many tokens were generated
  bool return_scores = false;   // one log-prob per token (the engine), a score per text (reply)
  // Beam: hypotheses returned, best first (1..num_beams), as HF num_return_sequences.
  int num_return_sequences = 1;
  // HF generate()'s logits processors, for every search: a seen token's logit is divided (or,
  // when negative, multiplied) by repetition_penalty (1: none); no n-gram of
  // no_repeat_ngram_size tokens (0: none) comes twice.
  float repetition_penalty = 1.0f;
  int no_repeat_ngram_size = 0;
  // Sampling (greedy search only, num_beams 1): each token drawn from the softmax of
  // logits / temperature, kept to the top_k (0: all) most likely and to the smallest set
  // reaching top_p (1: all).
  bool do_sample = false;
  float temperature = 1.0f;
  int top_k = kDefaultTopK;
  float top_p = 1.0f;
  // The sequence's own random generator's seed: the same seed, the same tokens, whatever else
  // runs in the batch. Not given: a random one.
  std::optional<uint64_t> seed = std::nullopt;

  bool operator==(const SearchOptions&) const = default;
};

}  // namespace seqpipe::generation
