#pragma once
// What every seqpipe command line shares. CLI11 (Debian libcli11-dev) walks the arguments; these
// helpers keep one wording across the programs ("--x needs an integer, got 'y'", "--x needs a
// value") and report every usage problem as a UsageError (exit status 2). set_up turns CLI11's
// help flag off: a program either prints its own usage text for a -h/--help flag of its own, or
// sets CLI11's help flag again and prints app.help() when parse() lets CLI::CallForHelp through.
#include <CLI/CLI.hpp>
#include <charconv>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace seqpipe::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `flag`'s value as a T (an integer or floating type); the whole text must be the number.
template <typename T>
T parse_number(std::string_view flag, std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw UsageError(std::string(flag) + " needs " +
                     (std::is_floating_point_v<T> ? "a number"
                      : std::is_signed_v<T>       ? "an integer"
                                                  : "an unsigned integer") +
                     ", got '" + std::string(text) + "'");
  }
  return value;
}

// An app as every seqpipe program uses it: no generated help (add -h/--help as a flag and print
// the program's usage text), a single-value option given twice keeps the last value, and the
// arguments no option takes are returned by parse() for the program to take or refuse.
void set_up(CLI::App& app);

// An option whose value is converted by parse_number: one wording for a bad number in every
// program, and only plain decimal numbers (CLI11 would also take 0x10 for an integer).
// Its value is called N (an integer) or X (a number) in generated help.
template <typename T>
CLI::Option* add_number(CLI::App& app, const std::string& flag, T& target) {
  return app
      .add_option_function<std::string>(
          flag, [flag, &target](const std::string& text) { target = parse_number<T>(flag, text); })
      ->type_name(std::is_floating_point_v<T> ? "X" : "N");
}
template <typename T>
CLI::Option* add_number(CLI::App& app, const std::string& flag, std::optional<T>& target) {
  return app
      .add_option_function<std::string>(
          flag, [flag, &target](const std::string& text) { target = parse_number<T>(flag, text); })
      ->type_name(std::is_floating_point_v<T> ? "X" : "N");
}

// A repeatable option taking one value each time: every value, in order (`--set a=1 --set b=2`).
CLI::Option* add_repeated(CLI::App& app, const std::string& flag, std::vector<std::string>& values);

// Parses argv[1..argc). Returns the arguments no option took, in order, the selected
// subcommands' included: positionals, and unknown flags for the program to refuse in its own
// words ("--" is dropped). Throws UsageError: "--x needs a value" for an option given without
// one, else CLI11's own message; CLI::Success (--help) passes through. `--x=` gives --x the empty
// value (CLI11 alone would read the next argument as its value).
std::vector<std::string> parse(CLI::App& app, int argc, char** argv);

}  // namespace seqpipe::cli
