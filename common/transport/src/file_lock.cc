#include "seqpipe/transport/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace seqpipe {

std::optional<FileLock> FileLock::try_acquire(const std::string& path, pid_t* holder) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char text[32] = {};
    const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
    ::close(fd);
    if (holder) *holder = n > 0 ? static_cast<pid_t>(std::strtol(text, nullptr, 10)) : 0;
    return std::nullopt;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  // Without the pid the lock still holds; only another taker's refusal would lack it.
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
  return FileLock(fd);
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace seqpipe
