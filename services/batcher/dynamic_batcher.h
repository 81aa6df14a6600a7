#pragma once
// Dynamic batching as Triton's dynamic_batch_scheduler does it: one class owns one queue and
// one policy; the decision "send this batch now" or "wait N us" is a pure function of the
// queue and the clock (decide_batch), so it is unit-tested with an injected time.
#include <chrono>
#include <cstdint>
#include <vector>

namespace seqpipe::batcher {

using Clock = std::chrono::steady_clock;

struct BatchPolicy {
  int max_batch_size = 32;                         // sequences per encoder batch
  std::vector<int> preferred_batch_sizes{8, 16, 32};  // sent at once when they can be formed
  std::chrono::microseconds max_queue_delay{2000};  // longest the oldest sequence waits for company
  int max_batch_tokens = 4096;                     // batch_size x longest sequence (padding included)
  int max_queue_size = 1024;                       // beyond it enqueue() refuses (overloaded)
};

struct QueuedSequence {
  uint64_t id = 0;
  int tokens = 0;  // input length, eos included
  Clock::time_point enqueued;
  Clock::time_point deadline;  // answered deadline_exceeded instead of encoded after this
};

struct BatchDecision {
  enum class Action { kIdle, kWait, kSend };
  Action action = Action::kIdle;
  std::vector<size_t> batch;    // kSend: queue indices, oldest first
  std::vector<size_t> expired;  // queue indices past their deadline (whatever the action)
  std::chrono::microseconds wait{0};  // kWait: time until the decision may change
  // Scratch for the length grouping, kept here so deciding allocates nothing once warm.
  std::vector<size_t> candidates;
};

// The batching decision for `queue` (in arrival order) at `now`:
//  - sequences past their deadline are listed in `expired` and take no part;
//  - the batch is anchored on the oldest live sequence and filled with the sequences closest to
//    it in length (less padding), while count <= max_batch_size and count x longest <=
//    max_batch_tokens;
//  - send now when the batch is full (max_batch_size, or a candidate does not fit the token budget),
//    or when a preferred size can be formed (the largest one that fits), or when the oldest
//    sequence has waited max_queue_delay (then whatever was formed);
//  - otherwise wait until the oldest sequence's delay runs out (or the earliest deadline, if sooner).
void decide_batch(const std::vector<QueuedSequence>& queue, Clock::time_point now, const BatchPolicy& policy,
                  BatchDecision& decision);

// The queue and its policy. Not thread-safe: the batcher's loop owns it.
class DynamicBatcher {
 public:
  explicit DynamicBatcher(BatchPolicy policy);

  const BatchPolicy& policy() const { return policy_; }
  size_t size() const { return queue_.size(); }

  // False (and nothing queued) when the queue holds max_queue_size sequences: reply overloaded.
  bool enqueue(const QueuedSequence& sequence);

  // Runs decide_batch; moves the batch (oldest first) into `batch` and the expired sequences
  // into `expired`, removing both from the queue. Returns the decision (its wait for kWait).
  const BatchDecision& poll(Clock::time_point now, std::vector<QueuedSequence>& batch,
                            std::vector<QueuedSequence>& expired);

  // Removes a queued sequence (cancellation); false when it is not queued.
  bool remove(uint64_t id);

 private:
  BatchPolicy policy_;
  std::vector<QueuedSequence> queue_;  // arrival order; capacity reserved to max_queue_size
  std::vector<bool> taken_;
  BatchDecision decision_;
};

}  // namespace seqpipe::batcher
