// seqpipe up's poll mode: which loads and unloads a repository's changes on disk call for, on a
// real directory tree and an injected clock and index.
#include "seqpipe/control/repository_poll.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../test_util.h"

namespace seqpipe::control {
namespace {

namespace fs = std::filesystem;
using model_control::ControlReply;
using model_control::ControlRequest;
using model_control::Op;
using model_control::State;
using std::chrono::milliseconds;

class RepositoryPollTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("seqpipe_poll_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    add("alpha", 1);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string dir(const std::string& name, int version) const {
    return (root_ / name / std::to_string(version)).string();
  }
  void add(const std::string& name, int version, const std::string& content = "x") {
    test_util::write_model_files(dir(name, version), content);
  }
  // Starts a poll on the repository as it is now, every version in it served.
  RepositoryPoll start() {
    RepositoryPoll poll(root_.string(), kInterval);
    now_ = Clock::now();
    poll.started(config::scan_repository(root_.string()), now_);
    return poll;
  }
  // One scan, one interval after the last.
  std::vector<ControlRequest> scan(RepositoryPoll& poll, const ControlReply& index) {
    now_ += kInterval;
    EXPECT_TRUE(poll.due(now_));
    return poll.poll(now_, index);
  }
  static ControlReply index(std::vector<model_control::ModelEntry> models) {
    return ControlReply{std::nullopt, std::move(models)};
  }

  static constexpr milliseconds kInterval{100};
  fs::path root_;
  Clock::time_point now_;
};

using Requests = std::vector<ControlRequest>;

TEST_F(RepositoryPollTest, NothingChangedNothingToDo) {
  RepositoryPoll poll = start();
  const auto served = index({{"alpha", 1, State::kReady, ""}});
  EXPECT_EQ(scan(poll, served), Requests{});
  EXPECT_EQ(scan(poll, served), Requests{});
}

TEST_F(RepositoryPollTest, ANewNewestVersionIsLoadedOnceItsFilesStayTheSame) {
  RepositoryPoll poll = start();
  const auto served = index({{"alpha", 1, State::kReady, ""}});
  add("alpha", 2);
  EXPECT_EQ(scan(poll, served), Requests{});  // seen once: maybe still being copied
  EXPECT_EQ(scan(poll, served), (Requests{{Op::kLoad, "alpha", 2}}));
  EXPECT_EQ(scan(poll, index({{"alpha", 1, State::kReady, ""}, {"alpha", 2, State::kLoading, ""}})),
            Requests{});
}

TEST_F(RepositoryPollTest, AFileStillGrowingIsNotLoaded) {
  RepositoryPoll poll = start();
  const auto served = index({{"alpha", 1, State::kReady, ""}});
  add("alpha", 2, "x");
  EXPECT_EQ(scan(poll, served), Requests{});
  add("alpha", 2, "xx");
  EXPECT_EQ(scan(poll, served), Requests{});
  EXPECT_EQ(scan(poll, served), (Requests{{Op::kLoad, "alpha", 2}}));
}

// A copy that stalls half-way leaves files that stay the same across polls: the weights file's
// own header says it is not whole, so it is not loaded until it is.
TEST_F(RepositoryPollTest, AStalledHalfCopiedWeightsFileIsNotLoaded) {
  RepositoryPoll poll = start();
  const auto served = index({{"alpha", 1, State::kReady, ""}});
  add("alpha", 2, "copied");
  const fs::path weights = fs::path(dir("alpha", 2)) / "model.safetensors";
  const auto whole = fs::file_size(weights);
  fs::resize_file(weights, whole / 2);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(scan(poll, served), Requests{});
  add("alpha", 2, "copied");  // the copy finished
  EXPECT_EQ(scan(poll, served), Requests{});
  EXPECT_EQ(scan(poll, served), (Requests{{Op::kLoad, "alpha", 2}}));
}

TEST_F(RepositoryPollTest, AnOlderVersionAddedIsNotLoaded) {
  add("alpha", 3);
  RepositoryPoll poll = start();
  const auto served = index({{"alpha", 1, State::kReady, ""}, {"alpha", 3, State::kReady, ""}});
  add("alpha", 2);
  EXPECT_EQ(scan(poll, served), Requests{});
  EXPECT_EQ(scan(poll, served), Requests{});
}

TEST_F(RepositoryPollTest, AFailedLoadIsTriedAgainOnlyWhenItsFilesChange) {
  RepositoryPoll poll = start();
  add("beta", 1);
  const auto failed = index({{"alpha", 1, State::kReady, ""},
                             {"beta", 1, State::kUnavailable, "its encoder exited with status 2"}});
  EXPECT_EQ(scan(poll, index({{"alpha", 1, State::kReady, ""}})), Requests{});
  EXPECT_EQ(scan(poll, index({{"alpha", 1, State::kReady, ""}})),
            (Requests{{Op::kLoad, "beta", 1}}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(scan(poll, failed), Requests{});
  add("beta", 1, "fixed");
  EXPECT_EQ(scan(poll, failed), Requests{});
  EXPECT_EQ(scan(poll, failed), (Requests{{Op::kLoad, "beta", 1}}));
}

TEST_F(RepositoryPollTest, ARemovedNewestVersionReloadsTheNextOne) {
  add("alpha", 2);
  RepositoryPoll poll = start();
  fs::remove_all(dir("alpha", 2));
  // alpha/1 was unloaded when alpha/2 was loaded: back to it, as a reload.
  EXPECT_EQ(scan(poll, index({{"alpha", 1, State::kUnavailable, "unloaded"},
                              {"alpha", 2, State::kReady, ""}})),
            (Requests{{Op::kLoad, "alpha", 1}}));
  EXPECT_EQ(scan(poll, index({{"alpha", 1, State::kLoading, ""}, {"alpha", 2, State::kReady, ""}})),
            Requests{});
}

TEST_F(RepositoryPollTest, ARemovedVersionBesideAServedOneIsUnloaded) {
  add("alpha", 2);
  RepositoryPoll poll = start();
  fs::remove_all(dir("alpha", 2));
  const auto both = index({{"alpha", 1, State::kReady, ""}, {"alpha", 2, State::kReady, ""}});
  EXPECT_EQ(scan(poll, both), (Requests{{Op::kUnload, "alpha", 2}}));
  EXPECT_EQ(scan(poll, both), Requests{});  // asked once
}

TEST_F(RepositoryPollTest, ARemovedModelIsUnloadedAndAnUnloadedOneLeftAlone) {
  add("beta", 1);
  RepositoryPoll poll = start();
  fs::remove_all(root_ / "beta");
  EXPECT_EQ(scan(poll, index({{"alpha", 1, State::kUnavailable, "unloaded"},
                              {"beta", 1, State::kReady, ""}})),
            (Requests{{Op::kUnload, "beta", 1}}));
  // alpha/1, unloaded by hand, stays unloaded while its files stay as they are.
  EXPECT_EQ(scan(poll, index({{"alpha", 1, State::kUnavailable, "unloaded"}})), Requests{});
}

TEST_F(RepositoryPollTest, ARepositoryThatCannotBeReadUnloadsNothing) {
  RepositoryPoll poll = start();
  const auto served = index({{"alpha", 1, State::kReady, ""}});
  fs::rename(root_, root_.string() + ".away");
  EXPECT_EQ(scan(poll, served), Requests{});
  EXPECT_EQ(scan(poll, served), Requests{});
  fs::rename(root_.string() + ".away", root_);
  EXPECT_EQ(scan(poll, served), Requests{});
}

TEST_F(RepositoryPollTest, ZeroIsOff) {
  RepositoryPoll poll(root_.string(), milliseconds(0));
  poll.started(config::scan_repository(root_.string()), Clock::now());
  EXPECT_FALSE(poll.due(Clock::now() + std::chrono::hours(1)));
}

}  // namespace
}  // namespace seqpipe::control
