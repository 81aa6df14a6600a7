#include "seqpipe/cli/generate_flags.h"

#include <algorithm>
#include <type_traits>
#include <variant>

#include "seqpipe/cli/cli.h"

namespace seqpipe::cli {

namespace {

// What a flag's value is called in usage lines.
std::string_view value_name(const protocol::GenerateOption& option) {
  constexpr std::string_view kNames[] = {"N", "X", "", "N", "TEXT"};
  return kNames[option.member.index()];
}

std::string description(const protocol::GenerateOption& option) {
  std::string text(option.help);
  const std::string range = protocol::range_text(option);
  if (!range.empty()) text += "; " + range;
  return text + " (default: " + protocol::default_text(option) + ")";
}

}  // namespace

void add_generate_options(CLI::App& app, protocol::GenerateParams& params, OptionFilter wanted) {
  for (const protocol::GenerateOption& option : protocol::generate_options()) {
    if (wanted && !wanted(option)) continue;
    const std::string flag(option.flag);
    CLI::Option* added = std::visit(
        [&](auto member) -> CLI::Option* {
          auto& target = params.*member;
          using T = std::decay_t<decltype(target)>;
          if constexpr (std::is_same_v<T, bool>) {
            return app.add_flag(flag, target);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            return add_repeated(app, flag, target);
          } else {
            return add_number(app, flag, target);
          }
        },
        option.member);
    added->description(description(option));
  }
}

std::string generate_options_usage(OptionFilter wanted) {
  std::vector<std::pair<std::string, std::string>> lines;
  size_t width = 0;
  for (const protocol::GenerateOption& option : protocol::generate_options()) {
    if (wanted && !wanted(option)) continue;
    std::string flag(option.flag);
    if (!value_name(option).empty()) flag += " " + std::string(value_name(option));
    width = std::max(width, flag.size());
    lines.emplace_back(std::move(flag), description(option));
  }
  std::string out;
  for (const auto& [flag, text] : lines)
    out += "  " + flag + std::string(width + 2 - flag.size(), ' ') + text + "\n";
  return out;
}

}  // namespace seqpipe::cli
