#pragma once
// The hand-over from the front doors' threads (HTTP's event loop) to the gateway's loop thread:
// a bounded queue of typed requests under a mutex, and an eventfd the loop polls with its
// sockets, which carries no payload (a wake-up). The loop takes everything waiting at once and
// gives each to Gateway::submit.
#include <cstddef>
#include <deque>
#include <mutex>
#include <vector>

#include "gateway/gateway.h"

namespace seqpipe::gateway {

class Submissions {
 public:
  // At most `capacity` requests wait; one more is refused (as the inproc socket's high-water
  // mark refused a send before).
  explicit Submissions(size_t capacity = kDefaultCapacity);
  ~Submissions();
  Submissions(const Submissions&) = delete;
  Submissions& operator=(const Submissions&) = delete;

  static constexpr size_t kDefaultCapacity = 1000;

  // From any thread. False when the queue is full: the door answers the request itself.
  bool push(Submission&& submission);
  // Readable while requests wait.
  int wake_fd() const { return wake_fd_; }
  // On the gateway's thread: every request waiting, in the order handed over.
  std::vector<Submission> take();

 private:
  size_t capacity_;
  int wake_fd_ = -1;
  std::mutex mutex_;
  std::deque<Submission> waiting_;
};

}  // namespace seqpipe::gateway
