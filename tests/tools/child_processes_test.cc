// seqpipe up's children as real processes: small shell commands that exit or run on.
#include "seqpipe/child_processes.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "seqpipe/runtime/service_main.h"

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

// The scheduling policy (field 41 of /proc/PID/stat) and environment of process `pid`.
int policy_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // from field 3, the state
  std::string field;
  for (int i = 3; i <= 41; ++i) fields >> field;
  return std::stoi(field);
}
std::string environment_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ");
  std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(env.begin(), env.end(), '\0', '\n');
  return env;
}

// Waits up to 5 s for process `pid` to run `program` (its exec done: before, /proc shows what it
// had from the fork).
bool runs(pid_t pid, const std::string& program) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
    std::string comm;
    if (std::getline(in, comm) && comm == program) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

TEST(ChildProcessesTest, AChildStartedIdleRunsAtSchedIdleAndIsToldSo) {
  ChildProcesses children({}, fast());
  ChildSpec idle = shell("exec sleep 30"), normal = shell("exec sleep 30");
  idle.start_idle = true;
  idle.group = normal.group = "alpha/2";
  ::setenv(service::kStartedIdleVariable, "1", 1);  // seqpipe up's own is not passed on
  children.add({idle, normal});
  ::unsetenv(service::kStartedIdleVariable);
  const auto pids = children.pids("alpha/2");
  ASSERT_EQ(pids.size(), 2u);
  for (const pid_t pid : pids) ASSERT_TRUE(runs(pid, "sleep")) << pid;
  EXPECT_EQ(policy_of(pids[0]), SCHED_IDLE);
  EXPECT_NE(environment_of(pids[0]).find(std::string(service::kStartedIdleVariable) + "=1\n"),
            std::string::npos);
  EXPECT_EQ(policy_of(pids[1]), SCHED_OTHER);
  EXPECT_EQ(environment_of(pids[1]).find(service::kStartedIdleVariable), std::string::npos);
  children.stop(milliseconds(2000));
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
