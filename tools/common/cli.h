#pragma once
// What every seqpipe command-line tool does with its arguments: walk the flags, take a flag's
// value, parse numbers strictly, and report bad usage as a UsageError (exit status 2).
#include <charconv>
#include <stdexcept>
#include <string>
#include <string_view>

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

// Walks argv: while (args.next()) { if (args.flag() == "--x") x = args.value(); ... }
class ArgCursor {
 public:
  ArgCursor(int argc, char** argv) : argc_(argc), argv_(argv) {}
  bool next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    return true;
  }
  const std::string& flag() const { return flag_; }
  // The argument after the current flag; a UsageError when there is none.
  std::string value() {
    if (i_ + 1 >= argc_) throw UsageError(flag_ + " needs a value");
    return argv_[++i_];
  }

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string flag_;
};

}  // namespace seqpipe::cli
