#pragma once
// An exclusive flock(2) on a file, held while the object lives, with the holder's pid written in
// the file. The kernel drops the lock when its holder dies, so a crashed pipeline never leaves a
// stale lock; the file itself stays (unlinking a lock file races with the next taker).
#include <sys/types.h>

#include <optional>
#include <string>

namespace seqpipe {

class FileLock {
 public:
  // The lock on `path` (created 0600 if missing, never through a symlink), or nullopt when
  // another process holds it; then `*holder` is its pid (0 when unreadable). Throws
  // std::runtime_error when the file cannot be opened.
  static std::optional<FileLock> try_acquire(const std::string& path, pid_t* holder);

  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace seqpipe
