// seqpipe up's children as real processes: small shell commands that exit or run on.
#include "seqpipe/child_processes.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace seqpipe::supervisor {
namespace {

using std::chrono::milliseconds;

ChildSpec shell(const std::string& command) {
  return {"test", 0, {"/bin/sh", "-c", command}};
}

// Quick pauses and a short quick-exit window, so a test runs in well under a second.
RestartPolicy fast() {
  return {.first_pause = milliseconds(10),
          .max_pause = milliseconds(40),
          .quick_exit = milliseconds(5000),
          .start_limit = 3};
}

TEST(ChildProcessesTest, GivesUpOnAChildExitingWithTheBadConfigStatus) {
  ChildProcesses children({shell("exit 2"), shell("sleep 30")}, fast());
  children.start();
  EXPECT_EQ(children.running(), 2u);
  EXPECT_TRUE(children.supervise([] { return false; }));
  EXPECT_EQ(children.running(), 1u);  // the sleeper still runs until stop()
  children.stop(milliseconds(2000));
  EXPECT_EQ(children.running(), 0u);
}

TEST(ChildProcessesTest, RestartsAChildThatKeepsExitingUntilTheStartLimit) {
  // Each start appends a line: three quick exits in a row are three starts, then it gives up.
  char dir[] = "/tmp/seqpipe-children-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/starts";
  ChildProcesses children({shell("echo . >> " + log + "; exit 1")}, fast());
  children.start();
  EXPECT_TRUE(children.supervise([] { return false; }));
  std::ifstream in(log);
  int starts = 0;
  for (std::string line; std::getline(in, line);) ++starts;
  EXPECT_EQ(starts, 3);
  std::filesystem::remove_all(dir);
}

TEST(ChildProcessesTest, StopEndsChildrenThatIgnoreSigtermWithSigkill) {
  ChildProcesses children({shell("trap '' TERM; while :; do sleep 0.05; done"), shell("sleep 30")},
                          fast());
  children.start();
  int rounds = 0;
  EXPECT_FALSE(children.supervise([&] { return ++rounds > 3; }));  // stop asked: not given up
  EXPECT_EQ(children.running(), 2u);
  const auto started = Clock::now();
  children.stop(milliseconds(300));
  EXPECT_EQ(children.running(), 0u);
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(5));
}

TEST(ChildProcessesTest, AGroupIsAddedAndStoppedWithoutTheOthers) {
  ChildProcesses children({shell("sleep 30")}, fast());
  children.start();
  ChildSpec a = shell("sleep 30"), b = shell("sleep 30");
  a.group = b.group = "alpha/2";
  children.add({a, b});
  const auto pids = children.pids("alpha/2");
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_EQ(children.running(), 3u);
  children.stop_group("alpha/2", milliseconds(2000));
  EXPECT_TRUE(children.pids("alpha/2").empty());
  EXPECT_EQ(children.running(), 1u);
  for (const pid_t pid : pids) EXPECT_NE(::kill(pid, 0), 0) << pid << " still exists";
  children.stop(milliseconds(2000));
}

TEST(ChildProcessesTest, AGroupAddedWithAStartGapStartsOneChildPerGap) {
  ChildProcesses children({}, fast());
  ChildSpec spec = shell("sleep 30");
  spec.group = "alpha/2";
  const auto added = Clock::now();
  children.add({spec, spec, spec}, milliseconds(200));
  EXPECT_EQ(children.pids("alpha/2").size(), 1u);  // the first at once
  std::vector<Clock::duration> started;            // when each next one ran, from the add
  while (started.size() < 2 && Clock::now() - added < std::chrono::seconds(5)) {
    children.step();
    if (children.pids("alpha/2").size() > started.size() + 1)
      started.push_back(Clock::now() - added);
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_EQ(started.size(), 2u);
  EXPECT_GE(started[0], milliseconds(200));
  EXPECT_GE(started[1], milliseconds(400));
  children.stop_group("alpha/2", milliseconds(2000));  // the not yet started ones too
  EXPECT_EQ(children.running(), 0u);
}

TEST(ChildProcessesTest, AGroupsChildGivenUpIsReportedWithItsGroupAndStaysStopped) {
  ChildSpec bad = shell("exit 2");
  bad.group = "corrupt/1";
  ChildProcesses children({shell("sleep 30"), bad}, fast());
  children.start();
  std::vector<GivenUp> given_up;
  for (int round = 0; round < 100 && given_up.empty(); ++round) {
    given_up = children.step();
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(given_up.size(), 1u);
  EXPECT_EQ(given_up[0].group, "corrupt/1");
  EXPECT_EQ(given_up[0].reason,
            "test #0 exited with status 2 (bad usage or config)");  // said nothing
  for (int round = 0; round < 5; ++round) EXPECT_TRUE(children.step().empty());
  EXPECT_EQ(children.running(), 1u);  // not started again
  children.stop(milliseconds(2000));
}

TEST(ChildProcessesTest, AChildGivenUpIsReportedWithWhatItWroteToItsReasonPipe) {
  // A service writes its error there (service::kExitReasonFdVariable) before it exits.
  ChildSpec bad = shell(
      "echo 'model.dir /m does not load: /m/config.json: not valid JSON' \
                        > /proc/self/fd/$SEQPIPE_EXIT_REASON_FD; exit 2");
  bad.group = "corrupt/1";
  ChildProcesses children({}, fast());
  children.add({bad});
  std::vector<GivenUp> given_up;
  for (int round = 0; round < 100 && given_up.empty(); ++round) {
    given_up = children.step();
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(given_up.size(), 1u);
  EXPECT_EQ(given_up[0].reason,
            "test #0 exited with status 2 (bad usage or config): model.dir /m does not load: "
            "/m/config.json: not valid JSON");
}

}  // namespace
}  // namespace seqpipe::supervisor
