// The generation options' flags come from the option table: every row has its flag, and each
// flag sets its option.
#include "seqpipe/cli/generate_flags.h"

#include <gtest/gtest.h>

#include "../protocol/option_samples.h"
#include "seqpipe/cli/cli.h"

namespace seqpipe::cli {
namespace {

TEST(GenerateFlagsTest, EveryRowIsAFlagThatSetsItsOption) {
  for (const protocol::GenerateOption& option : protocol::generate_options()) {
    SCOPED_TRACE(option.name);
    protocol::GenerateParams params;
    CLI::App app;
    set_up(app);
    add_generate_options(app, params);
    const nlohmann::json sample = testing::option_sample(option);
    std::vector<std::string> args = {"prog", std::string(option.flag)};
    if (!sample.is_boolean())
      args.push_back(sample.is_array() ? sample[0].get<std::string>() : sample.dump());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    EXPECT_TRUE(parse(app, static_cast<int>(argv.size()), argv.data()).empty());
    const protocol::GenerateParams want = testing::with_sample(protocol::GenerateParams{}, option);
    EXPECT_EQ(protocol::value_text(option, params), protocol::value_text(option, want));
    EXPECT_NE(generate_options_usage().find(std::string(option.flag) + " "), std::string::npos);
  }
}

TEST(GenerateFlagsTest, AFilterLeavesRowsOut) {
  CLI::App app;
  protocol::GenerateParams params;
  add_generate_options(app, params,
                       [](const protocol::GenerateOption& o) { return o.name != "priority"; });
  EXPECT_EQ(app.get_option_no_throw("--priority"), nullptr);
  EXPECT_NE(app.get_option_no_throw("--top-k"), nullptr);
  EXPECT_NE(app.get_option("--top-k")->get_description().find("(default: 50)"), std::string::npos);
}

}  // namespace
}  // namespace seqpipe::cli
