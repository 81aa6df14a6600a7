#include "seqpipe/cli/cli.h"

#include <charconv>
#include <string_view>
#include <system_error>

namespace seqpipe::cli {

void set_up(CLI::App& app) {
  app.set_help_flag();
  app.allow_extras();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

CLI::Option* add_repeated(CLI::App& app, const std::string& flag,
                          std::vector<std::string>& values) {
  return app.add_option(flag, values)->allow_extra_args(false);
}

namespace {

// Whether CLI11 reads `arg` as a value: anything but an option name (a negative number is a
// value).
bool is_value(std::string_view arg) {
  if (!arg.starts_with('-') || arg.size() == 1) return true;
  double number = 0;
  const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), number);
  return ec == std::errc() && end == arg.data() + arg.size();
}

// The option of `app` (or of a subcommand) named `name` that takes a value, or null.
const CLI::Option* value_option(const CLI::App& app, std::string_view name) {
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_type_size() != 0 && option->check_name(std::string(name))) return option;
  }
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (const CLI::Option* option = value_option(*sub, name)) return option;
  }
  return nullptr;
}

// The first option given without the value it takes, or "".
std::string missing_value(const CLI::App& app, const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const CLI::Option* option = value_option(app, args[i]);
    if (option && (i + 1 == args.size() || !is_value(args[i + 1]))) return args[i];
  }
  return "";
}

}  // namespace

std::vector<std::string> parse(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--") && arg.find('=') == arg.size() - 1) {
      args.emplace_back(arg.substr(0, arg.size() - 1));
      args.emplace_back("");
    } else {
      args.emplace_back(arg);
    }
  }
  std::vector<std::string> last_first(args.rbegin(), args.rend());  // CLI11's vector form
  try {
    app.parse(last_first);
  } catch (const CLI::Success&) {
    throw;  // --help of an app that has CLI11's help flag: the caller prints the help
  } catch (const CLI::ArgumentMismatch& e) {
    const std::string option = missing_value(app, args);
    throw UsageError(option.empty() ? e.what() : option + " needs a value");
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  std::vector<std::string> rest;
  for (std::string& arg : app.remaining(true)) {
    if (arg != "--") rest.push_back(std::move(arg));
  }
  return rest;
}

}  // namespace seqpipe::cli
