#pragma once
// For the tests that run every row of the option table through a front door: a value of each
// option that is valid under the default protocol::Limits and is not its default, as JSON and
// as GenerateParams; and the other options it needs (num_return_sequences > 1 needs beams).
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>

#include "seqpipe/protocol/generate_options.h"

namespace seqpipe::testing {

inline nlohmann::json option_sample(const protocol::GenerateOption& option) {
  const protocol::GenerateParams defaults;
  const protocol::OptionRange& r = option.range;
  return std::visit(
      [&](auto member) -> nlohmann::json {
        using T = std::decay_t<decltype(defaults.*member)>;
        if constexpr (std::is_same_v<T, bool>) {
          return !(defaults.*member);
        } else if constexpr (std::is_same_v<T, float>) {
          if (!std::isinf(r.hi)) return r.hi / 2;
          return std::isinf(r.lo) ? 2.0 : r.lo + 0.5;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          return nlohmann::json::array({"."});
        } else if constexpr (std::is_same_v<T, int>) {
          const auto lo = static_cast<int>(r.lo);
          return lo == defaults.*member ? lo + 1 : lo;
        } else {
          return static_cast<uint64_t>(r.lo);
        }
      },
      option.member);
}

// The params the other options must hold for `option`'s sample to be valid.
inline nlohmann::json option_companions(const protocol::GenerateOption& option) {
  if (option.name == "num_return_sequences") return {{"num_beams", 2}};
  return nlohmann::json::object();
}

// `params` with `option` set to its sample.
inline protocol::GenerateParams with_sample(protocol::GenerateParams params,
                                            const protocol::GenerateOption& option) {
  const nlohmann::json value = option_sample(option);
  std::visit(
      [&](auto member) {
        auto& target = params.*member;
        using T = std::decay_t<decltype(target)>;
        if constexpr (std::is_same_v<T, std::optional<uint64_t>>) {
          target = value.get<uint64_t>();
        } else {
          target = value.get<T>();
        }
      },
      option.member);
  return params;
}

}  // namespace seqpipe::testing
