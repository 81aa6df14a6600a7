#include "gateway/submissions.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>

namespace seqpipe::gateway {

Submissions::Submissions(size_t capacity)
    : capacity_(capacity), wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (wake_fd_ < 0) throw std::runtime_error("gateway: eventfd failed");
}

Submissions::~Submissions() {
  ::close(wake_fd_);
}

bool Submissions::push(Submission&& submission) {
  {
    std::lock_guard lock(mutex_);
    if (waiting_.size() >= capacity_) return false;
    waiting_.push_back(std::move(submission));
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  return true;
}

std::vector<Submission> Submissions::take() {
  uint64_t count = 0;
  (void)!::read(wake_fd_, &count, sizeof count);
  std::vector<Submission> taken;
  std::lock_guard lock(mutex_);
  taken.reserve(waiting_.size());
  for (auto& s : waiting_) taken.push_back(std::move(s));
  waiting_.clear();
  return taken;
}

}  // namespace seqpipe::gateway
