// The service command line and run_service_main: the front of every service main().
#include "seqpipe/runtime/service_main.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <future>
#include <string>
#include <thread>

#include "../test_util.h"
#include "seqpipe/config/config.h"

namespace seqpipe::service {
namespace {

using config::ConfigError;
using config::PipelineConfig;
using seqpipe::test_util::Argv;
using seqpipe::test_util::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kShippedConfig = std::string(SEQPIPE_SOURCE_DIR) + "/config/pipeline.yaml";

// ---------------------------------------------------------------------------------------------
// The service command line

TEST(ConfigServiceArgs, NoArguments) {
  Argv a{};
  const ServiceArgs args = parse_service_args(a.argc(), a.argv());
  EXPECT_EQ(args.config_path, "");
  EXPECT_TRUE(args.overrides.empty());
  EXPECT_EQ(args.help, "");
}

TEST(ConfigServiceArgs, ConfigAndRepeatedSets) {
  Argv a{"--config",
         "my.yaml",
         "--set",
         "batcher.max_batch_size=8",
         "--set=decoder.threads=2",
         "--set",
         "batcher.preferred_batch_sizes=[4,8]"};
  const ServiceArgs args = parse_service_args(a.argc(), a.argv());
  EXPECT_EQ(args.config_path, "my.yaml");
  EXPECT_THAT(args.overrides, ElementsAre("batcher.max_batch_size=8", "decoder.threads=2",
                                          "batcher.preferred_batch_sizes=[4,8]"));
  Argv b{"--config=other.yaml"};
  EXPECT_EQ(parse_service_args(b.argc(), b.argv()).config_path, "other.yaml");
}

TEST(ConfigServiceArgs, HelpIsGeneratedFromTheFlagsAndWinsOverTheRestOfTheLine) {
  Argv a{"--set", "x=1", "--help", "--bogus"};
  const std::string help = parse_service_args(a.argc(), a.argv(), "seqpipe-x", "Does x.").help;
  EXPECT_THAT(help, AllOf(HasSubstr("Does x."), HasSubstr("seqpipe-x"), HasSubstr("--config"),
                          HasSubstr("--set"), HasSubstr("batcher.max_batch_size=16"),
                          HasSubstr("--print-config"), HasSubstr("docs/CONFIG.md")));
  Argv b{"-h"};
  EXPECT_EQ(parse_service_args(b.argc(), b.argv(), "seqpipe-x", "Does x.").help, help);
}

TEST(ConfigServiceArgs, BadUsage) {
  auto error_of = [](Argv a) -> std::string {
    try {
      parse_service_args(a.argc(), a.argv());
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of(Argv{"--verbose"}), "unknown argument '--verbose'");
  EXPECT_EQ(error_of(Argv{"pipeline.yaml"}), "unknown argument 'pipeline.yaml'");
  EXPECT_EQ(error_of(Argv{"--config"}), "--config needs a value");
  EXPECT_EQ(error_of(Argv{"--set"}), "--set needs a value");
  EXPECT_EQ(error_of(Argv{"--set", "batcher.max_batch_size"}),
            "--set needs key=value, got 'batcher.max_batch_size'");
  EXPECT_EQ(error_of(Argv{"--set", "=3"}), "--set needs key=value, got '=3'");
  EXPECT_EQ(error_of(Argv{"--config", "a.yaml", "--config", "b.yaml"}), "--config given twice");
  EXPECT_EQ(error_of(Argv{"--config="}), "--config needs a file name");
}

// ---------------------------------------------------------------------------------------------
// run_service_main

class ConfigServiceMain : public ::testing::Test {
 protected:
  // Runs run_service_main("batcher") with `args`, capturing stdout and stderr.
  int run_main(Argv args) {
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    const int status =
        run_service_main(args.argc(), args.argv(), "batcher", "Forms encoder batches.",
                         [&](const PipelineConfig& config) {
                           ++run_calls;
                           seen = config;
                           if (run_throws) throw std::runtime_error("socket exploded");
                           return run_status;
                         });
    out = ::testing::internal::GetCapturedStdout();
    err = ::testing::internal::GetCapturedStderr();
    return status;
  }

  TempDir dir;
  std::string runtime_dir_set = "runtime_dir=" + dir.path() + "/run";
  int run_calls = 0;
  int run_status = 0;
  bool run_throws = false;
  PipelineConfig seen;
  std::string out, err;
};

TEST_F(ConfigServiceMain, GoodConfigRunsWithResolvedEndpoints) {
  EXPECT_EQ(run_main(Argv{"--config", kShippedConfig, "--set", runtime_dir_set, "--set",
                          "batcher.max_batch_size=64"}),
            0);
  EXPECT_EQ(run_calls, 1);
  EXPECT_EQ(seen.batcher.max_batch_size, 64);
  EXPECT_EQ(seen.runtime_dir, dir.path() + "/run");
  EXPECT_EQ(seen.batcher.encoder_endpoint, "ipc://" + dir.path() + "/run/encoder.sock");
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/run"));  // created for the sockets
  EXPECT_EQ(std::filesystem::status(dir.path() + "/run").permissions(),
            std::filesystem::perms::owner_all);
  EXPECT_EQ(err, "");
}

TEST_F(ConfigServiceMain, PrintConfigPrintsTheConfigInForceWithoutRunning) {
  EXPECT_EQ(run_main(Argv{"--config", kShippedConfig, "--set", runtime_dir_set, "--set",
                          "batcher.max_batch_size=64", "--print-config"}),
            0);
  EXPECT_EQ(run_calls, 0);
  EXPECT_THAT(out, AllOf(HasSubstr("max_batch_size: 64"), HasSubstr("max_message_bytes:"),
                         HasSubstr("max_texts:")));
  EXPECT_EQ(config::load_config_text(out, "printed", {}).batcher.max_batch_size, 64);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/run"));  // starts nothing
}

TEST_F(ConfigServiceMain, ReturnsWhatRunReturns) {
  run_status = 7;
  EXPECT_EQ(run_main(Argv{"--config", kShippedConfig, "--set", runtime_dir_set}), 7);
}

TEST_F(ConfigServiceMain, BadConfigExits2NamingTheKey) {
  const std::string path = dir.write("bad.yaml", "decoder:\n  num_slots: 4\n  max_beems: 2\n");
  EXPECT_EQ(run_main(Argv{"--config", path, "--set", runtime_dir_set}), 2);
  EXPECT_EQ(run_calls, 0);
  EXPECT_EQ(err, "seqpipe-batcher: " + path +
                     ":3: unknown key 'decoder.max_beems' (did you mean max_beams?)\n");
}

TEST_F(ConfigServiceMain, BadOverrideExits2NamingTheKey) {
  EXPECT_EQ(run_main(Argv{"--config", kShippedConfig, "--set", "decoder.threads=abc"}), 2);
  EXPECT_EQ(run_calls, 0);
  EXPECT_THAT(
      err,
      StartsWith("seqpipe-batcher: --set decoder.threads=abc: decoder.threads must be an integer"));
}

TEST_F(ConfigServiceMain, BadUsageExits2WithTheUsageLine) {
  EXPECT_EQ(run_main(Argv{"--sett", "a=b"}), 2);
  EXPECT_EQ(run_calls, 0);
  EXPECT_THAT(
      err, StartsWith("seqpipe-batcher: unknown argument '--sett' (see seqpipe-batcher --help)"));
}

TEST_F(ConfigServiceMain, MissingConfigFileExits2) {
  EXPECT_EQ(run_main(Argv{"--config", dir.path() + "/none.yaml"}), 2);
  EXPECT_THAT(err, HasSubstr("none.yaml: cannot read"));
}

TEST_F(ConfigServiceMain, HelpExits0WithoutRunning) {
  EXPECT_EQ(run_main(Argv{"--help"}), 0);
  EXPECT_EQ(run_calls, 0);
  EXPECT_THAT(out, AllOf(HasSubstr("seqpipe-batcher"), HasSubstr("--config FILE"),
                         HasSubstr("--set KEY=VALUE"), HasSubstr("Forms encoder batches."),
                         HasSubstr("config/pipeline.yaml"), HasSubstr("docs/CONFIG.md")));
  EXPECT_EQ(err, "");
}

TEST_F(ConfigServiceMain, RunThrowingExits1) {
  run_throws = true;
  EXPECT_EQ(run_main(Argv{"--config", kShippedConfig, "--set", runtime_dir_set}), 1);
  EXPECT_EQ(err, "seqpipe-batcher: error: socket exploded\n");
}

TEST_F(ConfigServiceMain, WithoutConfigUsesTheDefaultPathOrBuiltInDefaults) {
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  // No config/pipeline.yaml here: built-in defaults, and a note saying so.
  const int without_file = run_main(Argv{"--set", runtime_dir_set});
  const std::string err_without_file = err;
  const int seen_without_file = seen.batcher.max_batch_size;
  // With one: it is read.
  std::filesystem::create_directory(dir.path() + "/config");
  dir.write("config/pipeline.yaml",
            "batcher:\n  max_batch_size: 8\n  preferred_batch_sizes: [8]\n");
  const int with_file = run_main(Argv{"--set", runtime_dir_set});
  std::filesystem::current_path(previous);

  EXPECT_EQ(without_file, 0);
  EXPECT_THAT(err_without_file, HasSubstr("using the built-in defaults"));
  EXPECT_EQ(seen_without_file, 32);
  EXPECT_EQ(with_file, 0);
  EXPECT_EQ(seen.batcher.max_batch_size, 8);
  EXPECT_EQ(err, "");
}

}  // namespace
// A process started idle (as seqpipe up starts a loading version's replicas) leaves SCHED_IDLE
// with every thread, the ones made while idle too; without the variable nothing changes.
TEST(LeaveIdleStart, EveryThreadOfAProcessStartedIdleServesAtSchedOther) {
  if (!can_leave_idle()) GTEST_SKIP() << "no CAP_SYS_NICE and RLIMIT_NICE too low to leave it";
  const sched_param param{};
  ASSERT_EQ(::sched_setscheduler(0, SCHED_IDLE, &param), 0);
  std::promise<void> leave;
  std::promise<int> policy;
  std::thread made_while_idle([&] {  // inherits SCHED_IDLE
    leave.get_future().wait();
    policy.set_value(::sched_getscheduler(0));
  });
  leave_idle_start();  // the variable is not set: stays idle
  EXPECT_EQ(::sched_getscheduler(0), SCHED_IDLE);
  ::setenv(kStartedIdleVariable, "1", 1);
  leave_idle_start();
  ::unsetenv(kStartedIdleVariable);
  EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER);
  leave.set_value();
  EXPECT_EQ(policy.get_future().get(), SCHED_OTHER);
  made_while_idle.join();
}

}  // namespace seqpipe::service
