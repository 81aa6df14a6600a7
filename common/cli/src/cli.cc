#include "seqpipe/cli/cli.h"

#include <string_view>

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

std::vector<std::string> parse(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {  // CLI11 takes them in reverse order
    const std::string_view arg = argv[i];
    if (arg.starts_with("--") && arg.find('=') == arg.size() - 1) {
      args.emplace_back("");
      args.emplace_back(arg.substr(0, arg.size() - 1));
    } else {
      args.emplace_back(arg);
    }
  }
  try {
    app.parse(args);
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11 words a missing value "--x: 1 required TEXT missing"; find which option it means.
    for (const CLI::Option* option : app.get_options()) {
      const std::string name = option->get_name();
      if (std::string_view(e.what()).starts_with(name + ":")) {
        throw UsageError(name + " needs a value");
      }
    }
    throw UsageError(e.what());
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  std::vector<std::string> rest;
  for (std::string& arg : app.remaining()) {
    if (arg != "--") rest.push_back(std::move(arg));
  }
  return rest;
}

}  // namespace seqpipe::cli
