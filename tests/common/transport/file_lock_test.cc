// FileLock: one holder at a time (flock conflicts between open files, so one process shows it),
// the holder's pid for the refusal, the lock gone with its holder, and never through a link.
#include "seqpipe/transport/file_lock.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace seqpipe {
namespace {

class FileLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/seqpipe-lock-XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(FileLockTest, ASecondTakerIsRefusedWithTheHoldersPid) {
  const std::string path = dir_ + "/seqpipe.lock";
  pid_t holder = -1;
  auto first = FileLock::try_acquire(path, &holder);
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(FileLock::try_acquire(path, &holder).has_value());
  EXPECT_EQ(holder, getpid());
  first.reset();  // its holder gone, the lock is free again
  EXPECT_TRUE(FileLock::try_acquire(path, &holder).has_value());
}

TEST_F(FileLockTest, APlantedLinkIsNotFollowed) {
  const std::string path = dir_ + "/gateway.sock.lock";
  std::filesystem::create_symlink(dir_ + "/elsewhere", path);
  pid_t holder = 0;
  EXPECT_THROW((void)FileLock::try_acquire(path, &holder), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/elsewhere"));
}

}  // namespace
}  // namespace seqpipe
