// seqpipe up's restart decisions on an injected clock, and its model-directory check.
#include "seqpipe/supervisor.h"

#include <gtest/gtest.h>
#include <stdlib.h>

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

// With a repository every worker stage gets its replicas per model version, each told which
// version it serves; without one, its replicas for model.dir and nothing more.
TEST(WorkerSpecs, ReplicasPerModelVersionOfTheRepository) {
  config::PipelineConfig c;
  c.tokenizer.replicas = 1;
  c.encoder.replicas = 2;
  c.decoder.replicas = 1;
  c.postprocessor.replicas = 1;
  const std::vector<config::ModelVersion> models = {{"a", 1, "/r/a/1"}, {"b", 3, "/r/b/3"}};
  EXPECT_EQ(worker_specs(c, models).size(), 5u);  // no repository: model.dir's replicas
  EXPECT_TRUE(worker_specs(c, models)[0].sets.empty());
  c.model.repository = "/r";
  const auto specs = worker_specs(c, models);
  ASSERT_EQ(specs.size(), 10u);
  std::vector<std::string> encoders;
  for (const auto& s : specs) {
    if (s.stage != "encoder") continue;
    encoders.push_back(std::to_string(s.replica) + " " + s.sets.at(0) + " " + s.sets.at(1) + " " +
                       s.sets.at(2));
  }
  EXPECT_EQ(encoders,
            (std::vector<std::string>{"0 model.dir=/r/a/1 model.name=a model.version=1",
                                      "1 model.dir=/r/a/1 model.name=a model.version=1",
                                      "2 model.dir=/r/b/3 model.name=b model.version=3",
                                      "3 model.dir=/r/b/3 model.name=b model.version=3"}));
}

// The children's OpenMP wait: a short spin when the engine threads outnumber the cores, unless
// the user chose a wait (kept as it is); nothing when they fit.
TEST(OpenMpWaits, ShortSpinForOversubscribedEngineThreadsUnlessTheUserChose) {
  ::unsetenv("OMP_WAIT_POLICY");
  ::unsetenv("GOMP_SPINCOUNT");
  config::PipelineConfig c;
  c.encoder.replicas = c.decoder.replicas = 1;
  c.encoder.threads = c.decoder.threads = 2;
  EXPECT_EQ(set_openmp_waits(c, 4), "libgomp's default");  // 4 threads on 4 cores
  EXPECT_EQ(std::getenv("GOMP_SPINCOUNT"), nullptr);
  EXPECT_EQ(set_openmp_waits(c, 2), "GOMP_SPINCOUNT=3000");
  ::unsetenv("GOMP_SPINCOUNT");
  ::setenv("OMP_WAIT_POLICY", "passive", 1);
  EXPECT_EQ(set_openmp_waits(c, 2), "OMP_WAIT_POLICY=passive");
  EXPECT_EQ(std::getenv("GOMP_SPINCOUNT"), nullptr);
  ::unsetenv("OMP_WAIT_POLICY");
}

}  // namespace
}  // namespace seqpipe::supervisor
