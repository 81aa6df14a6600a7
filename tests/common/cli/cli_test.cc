// The shared command-line helpers: seqpipe's wording over CLI11, and the cases CLI11 alone gets
// wrong for us (an empty `--x=` value, plain decimal numbers only).
#include "seqpipe/cli/cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace seqpipe::cli {
namespace {

using ::testing::ElementsAre;

// A little program: --name TEXT, --count N, --limit N (optional), --set (repeated), --verbose.
struct Program {
  std::string name = "unset";
  int count = 0;
  std::optional<uint32_t> limit;
  std::vector<std::string> sets;
  bool verbose = false;
  CLI::App app;

  Program() {
    set_up(app);
    app.add_option("--name", name);
    add_number(app, "--count", count);
    add_number(app, "--limit", limit);
    add_repeated(app, "--set", sets);
    app.add_flag("--verbose", verbose);
  }
  std::vector<std::string> run(std::vector<std::string> args) {
    args.insert(args.begin(), "program");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return parse(app, static_cast<int>(argv.size()), argv.data());
  }
  std::string error_of(std::vector<std::string> args) {
    try {
      run(std::move(args));
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }
};

TEST(Cli, TakesOptionsInBothFormsAndReturnsTheRestInOrder) {
  Program p;
  const auto rest = p.run({"first", "--name", "a", "--count=3", "--set", "x=1", "--set=y=2",
                           "--unknown", "second", "--verbose", "--", "--third"});
  EXPECT_EQ(p.name, "a");
  EXPECT_EQ(p.count, 3);
  EXPECT_FALSE(p.limit.has_value());
  EXPECT_THAT(p.sets, ElementsAre("x=1", "y=2"));
  EXPECT_TRUE(p.verbose);
  EXPECT_THAT(rest, ElementsAre("first", "--unknown", "second", "--third"));
}

TEST(Cli, ARepeatedSingleValueOptionKeepsTheLast) {
  Program p;
  p.run({"--name", "a", "--name", "b", "--limit", "4", "--limit", "5"});
  EXPECT_EQ(p.name, "b");
  EXPECT_EQ(p.limit, 5u);
}

TEST(Cli, AnEmptyValueAfterEqualsIsTheEmptyValue) {
  Program p;
  const auto rest = p.run({"--name=", "next"});
  EXPECT_EQ(p.name, "");
  EXPECT_THAT(rest, ElementsAre("next"));  // not taken as --name's value
}

TEST(Cli, BadUsageIsWordedTheSameEverywhere) {
  EXPECT_EQ(Program().error_of({"--name"}), "--name needs a value");
  EXPECT_EQ(Program().error_of({"--set"}), "--set needs a value");
  EXPECT_EQ(Program().error_of({"--count", "two"}), "--count needs an integer, got 'two'");
  EXPECT_EQ(Program().error_of({"--count", "0x10"}), "--count needs an integer, got '0x10'");
  EXPECT_EQ(Program().error_of({"--count="}), "--count needs an integer, got ''");
  EXPECT_EQ(Program().error_of({"--limit", "-1"}), "--limit needs an unsigned integer, got '-1'");
  EXPECT_EQ(Program().error_of({"--count", "-7"}), "");  // a negative number is a value
}

TEST(Cli, ParseNumber) {
  EXPECT_EQ(parse_number<int>("--n", "42"), 42);
  EXPECT_DOUBLE_EQ(parse_number<double>("--x", "0.25"), 0.25);
  EXPECT_THROW(parse_number<int>("--n", "4 2"), UsageError);
  EXPECT_THROW(parse_number<int>("--n", "99999999999"), UsageError);
  EXPECT_THROW(parse_number<double>("--x", "1.5s"), UsageError);
}

// Subcommands as `seqpipe` uses them: their options and leftovers, their missing values named
// (found from the arguments, not from CLI11's message), and --help let through for CLI11's help.
TEST(Cli, SubcommandsKeepTheWordingAndLetHelpThrough) {
  CLI::App app;
  set_up(app);
  app.set_help_flag("-h,--help");
  int count = 0;
  CLI::App* sub = app.add_subcommand("run");
  add_number(*sub, "--count", count);
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "program");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return parse(app, static_cast<int>(argv.size()), argv.data());
  };
  EXPECT_THAT(run({"run", "--count", "-3", "--odd", "x"}), ElementsAre("--odd", "x"));
  EXPECT_EQ(count, -3);
  EXPECT_EQ(app.get_subcommands().front()->get_name(), "run");
  try {
    run({"run", "--count"});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--count needs a value");
  }
  EXPECT_THROW(run({"run", "--help"}), CLI::CallForHelp);
}

}  // namespace
}  // namespace seqpipe::cli
