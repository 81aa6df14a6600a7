// seqpipe up's children as real processes: small shell commands that exit or run on.
#include "seqpipe/child_processes.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace
}  // namespace seqpipe::supervisor
