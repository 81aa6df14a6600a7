// The option table's ranges are the engine's: at each bound of every numeric search option's row
// (and just past it), DecodingOptions::validate accepts exactly the values the row's range holds.
#include <gtest/gtest.h>

#include <cfloat>
#include <climits>
#include <cmath>
#include <type_traits>
#include <variant>
#include <vector>

#include "option_samples.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/protocol/generate_options.h"

namespace seqpipe {
namespace {

using protocol::GenerateOption;

// The named upper bounds at the engine's hard limits (the protocol's configured ones are lower).
double engine_upper(const generation::OptionRange& r) {
  if (r.upper == generation::UpperBound::kMaxNewTokens) return generation::kMaxNewTokens;
  if (r.upper == generation::UpperBound::kMaxBeams) return generation::kMaxBeams;
  return r.hi;
}

// Whether the engine accepts `option` (of type T) at `value`, every other option valid.
template <typename T>
bool engine_accepts(const GenerateOption& option, double value) {
  protocol::GenerateParams params;
  params.max_new_tokens = generation::kMaxNewTokens;  // so that min_new_tokens may reach it
  params.num_beams = generation::kMaxBeams;           // and num_return_sequences these
  if (option.name == "max_new_tokens") params.min_new_tokens = 0;
  if (option.name == "num_beams") params.num_return_sequences = 1;
  std::visit(
      [&](auto member) {
        using V = std::decay_t<decltype(params.*member)>;
        if constexpr (std::is_same_v<V, T>) params.*member = static_cast<T>(value);
      },
      option.member);
  const engine::DecodingOptions options = engine::decoding_options(params);
  try {
    options.validate(int64_t{generation::kMaxNewTokens} + 1);
    return true;
  } catch (const engine::EngineError&) {
    return false;
  }
}

// The values at and around a row's bounds.
std::vector<double> probes(const generation::OptionRange& r, bool integer) {
  const double hi = engine_upper(r);
  if (integer) {
    std::vector<double> out = {r.lo - 1, r.lo, r.lo + 1, hi - 1, hi};
    if (hi < INT_MAX) out.push_back(hi + 1);
    return out;
  }
  auto up = [](double x) { return std::nextafter(static_cast<float>(x), INFINITY); };
  auto down = [](double x) { return std::nextafter(static_cast<float>(x), -INFINITY); };
  std::vector<double> out = {NAN, -INFINITY, INFINITY, -FLT_MAX, FLT_MAX, 0.0, 1.0};
  if (std::isfinite(r.lo)) out.insert(out.end(), {down(r.lo), r.lo, up(r.lo)});
  if (std::isfinite(hi)) out.insert(out.end(), {down(hi), hi, up(hi)});
  return out;
}

TEST(DecodingOptionsRanges, EveryRowsRangeIsWhatTheEngineAccepts) {
  int rows = 0;
  for (const GenerateOption& option : protocol::generate_options()) {
    if (!protocol::is_search_option(option)) continue;
    const bool integer = std::holds_alternative<int protocol::GenerateParams::*>(option.member);
    const bool real = std::holds_alternative<float protocol::GenerateParams::*>(option.member);
    if (!integer && !real) continue;  // booleans; the seed (any 64-bit value: no range)
    ++rows;
    for (const double value : probes(option.range, integer)) {
      SCOPED_TRACE(std::string(option.name) + " = " + std::to_string(value));
      const bool in_table = std::isfinite(value) &&
                            generation::in_range(option.range, value, engine_upper(option.range));
      const bool accepted =
          integer ? engine_accepts<int>(option, value) : engine_accepts<float>(option, value);
      EXPECT_EQ(accepted, in_table);
    }
  }
  EXPECT_EQ(rows, 10);  // the search options but return_scores, do_sample and seed
}

TEST(DecodingOptionsRanges, TheCrossOptionRulesStayTheEngines) {
  engine::DecodingOptions options;
  options.max_new_tokens = 4;
  options.min_new_tokens = 5;
  EXPECT_THROW(options.validate(64), engine::EngineError);
  options.min_new_tokens = 4;
  options.num_beams = 2;
  options.num_return_sequences = 3;
  EXPECT_THROW(options.validate(64), engine::EngineError);
  options.num_return_sequences = 2;
  EXPECT_NO_THROW(options.validate(64));
  options.do_sample = true;
  EXPECT_THROW(options.validate(64), engine::EngineError);
}

TEST(DecodingOptionsRanges, TheEnginesDefaultsAreARequestsDefaults) {
  // A request that sets nothing decodes as the engine does by default.
  EXPECT_EQ(engine::decoding_options(protocol::GenerateParams{}), engine::DecodingOptions{});
}

TEST(DecodingOptionsRanges, EverySearchOptionReachesTheEngine) {
  const engine::DecodingOptions defaults = engine::decoding_options(protocol::GenerateParams{});
  for (const GenerateOption& option : protocol::generate_options()) {
    if (!protocol::is_search_option(option)) continue;
    SCOPED_TRACE(option.name);
    const protocol::GenerateParams sample =
        testing::with_sample(protocol::GenerateParams{}, option);
    EXPECT_NE(engine::decoding_options(sample), defaults);
  }
}

}  // namespace
}  // namespace seqpipe
