// seqpipe up's restart decisions on an injected clock, and its model-directory check.
#include "seqpipe/supervisor.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace seqpipe::supervisor {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const Clock::time_point t0{};

TEST(RestartTrackerTest, PauseDoublesWhileAChildKeepsExitingRightAfterItsStart) {
  RestartTracker tracker({.first_pause = milliseconds(500),
                          .max_pause = milliseconds(1500),
                          .quick_exit = seconds(5),
                          .start_limit = 10});
  Clock::time_point now = t0;
  std::vector<milliseconds> pauses;
  for (int i = 0; i < 4; ++i) {
    tracker.started(now);
    now += seconds(1);
    const Decision d = tracker.exited({.signaled = false, .code = 1}, now);
    ASSERT_FALSE(d.give_up);
    pauses.push_back(std::chrono::duration_cast<milliseconds>(d.restart_at - now));
    now = d.restart_at;
  }
  EXPECT_EQ(pauses, (std::vector<milliseconds>{milliseconds(500), milliseconds(1000),
                                               milliseconds(1500), milliseconds(1500)}));
  EXPECT_EQ(tracker.quick_exits_in_a_row(), 4);
}

TEST(RestartTrackerTest, AChildThatRanLongStartsOverWithTheFirstPause) {
  RestartTracker tracker({.start_limit = 3});
  tracker.started(t0);
  ASSERT_FALSE(tracker.exited({.code = 1}, t0 + seconds(1)).give_up);
  tracker.started(t0 + seconds(2));
  ASSERT_FALSE(tracker.exited({.code = 1}, t0 + seconds(3)).give_up);
  tracker.started(t0 + seconds(4));
  // Killed after a minute of serving: not a start failure.
  const Decision d = tracker.exited({.signaled = true, .code = 9}, t0 + seconds(64));
  EXPECT_FALSE(d.give_up);
  EXPECT_EQ(d.restart_at, t0 + seconds(64) + milliseconds(500));
  EXPECT_EQ(tracker.quick_exits_in_a_row(), 0);
}

TEST(RestartTrackerTest, GivesUpAfterTheStartLimitOfQuickExitsInARow) {
  RestartTracker tracker({.start_limit = 3});
  Clock::time_point now = t0;
  for (int i = 1; i <= 3; ++i) {
    tracker.started(now);
    now += milliseconds(100);
    const Decision d = tracker.exited({.code = 1}, now);
    EXPECT_EQ(d.give_up, i == 3) << "exit " << i;
    if (d.give_up) {
      EXPECT_EQ(d.reason, "exited 3 times in a row right after starting, last with status 1");
    }
    now = d.restart_at;
  }
}

TEST(RestartTrackerTest, GivesUpAtOnceOnTheBadConfigStatus) {
  RestartTracker tracker;
  tracker.started(t0);
  const Decision d = tracker.exited({.code = kBadConfigStatus}, t0 + seconds(30));
  EXPECT_TRUE(d.give_up);
  EXPECT_EQ(d.reason, "exited with status 2 (bad usage or config)");
  // A signal numbered 2 (SIGINT) is not a config error.
  RestartTracker interrupted;
  interrupted.started(t0);
  EXPECT_FALSE(interrupted.exited({.signaled = true, .code = 2}, t0 + seconds(30)).give_up);
}

TEST(CheckModelDirTest, NamesTheMissingDirectoryOrFiles) {
  namespace fs = std::filesystem;
  EXPECT_EQ(check_model_dir("/nonexistent/model"),
            std::vector<std::string>{"model.dir: '/nonexistent/model' is not a directory"});
  const fs::path dir = fs::path(::testing::TempDir()) / "supervisor_model";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{}";
  EXPECT_EQ(check_model_dir(dir.string()),
            (std::vector<std::string>{"model.dir: '" + dir.string() + "' has no model.safetensors",
                                      "model.dir: '" + dir.string() + "' has no spiece.model"}));
  std::ofstream(dir / "model.safetensors") << "";
  std::ofstream(dir / "spiece.model") << "";
  EXPECT_TRUE(check_model_dir(dir.string()).empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace seqpipe::supervisor
