#pragma once
// Dynamic batching as Triton's dynamic_batch_scheduler does it: one class owns the queues (one
// per priority level) and the policy; the decision "send this batch now" or "wait N us" is a
// pure function of the queue and the clock (decide_batch), so it is unit-tested with an injected
// time.
#include <chrono>
#include <cstdint>
#include <vector>

namespace seqpipe::batcher {

using Clock = std::chrono::steady_clock;

struct BatchPolicy {
  int max_batch_size = 32;                            // sequences per encoder batch
  std::vector<int> preferred_batch_sizes{8, 16, 32};  // sent at once when they can be formed
  std::chrono::microseconds max_queue_delay{2000};  // longest the oldest sequence waits for company
  int max_batch_tokens = 4096;  // batch_size x longest sequence (padding included)
  int max_queue_size = 1024;    // beyond it enqueue() refuses (overloaded); all levels together
  int priority_levels = 1;      // QueuedSequence::priority in [1, priority_levels], 1 highest
};

struct QueuedSequence {
  uint64_t id = 0;
  int tokens = 0;  // input length, eos included
  Clock::time_point enqueued;
  Clock::time_point deadline;  // answered deadline_exceeded instead of encoded after this
  int priority = 1;            // level, 1 = highest .. BatchPolicy::priority_levels
};

struct BatchDecision {
  enum class Action { kIdle, kWait, kSend };
  Action action = Action::kIdle;
  std::vector<size_t> batch;          // kSend: queue indices, oldest first
  std::vector<size_t> expired;        // queue indices past their deadline (whatever the action)
  std::chrono::microseconds wait{0};  // kWait: time until the decision may change
  // Scratch for the length grouping, kept here so deciding allocates nothing once warm.
  std::vector<size_t> candidates;
};

// The batching decision for `queue` (in dispatch order: by priority level, highest first, then
// arrival order within a level) at `now`:
//  - sequences past their deadline are listed in `expired` and take no part;
//  - the batch is anchored on the first live sequence (the oldest of the highest level) and
//    filled level by level, highest first, and within a level with the sequences closest to the
//    anchor in length (less padding), while count <= max_batch_size and count x longest <=
//    max_batch_tokens;
//  - send now when the batch is full (max_batch_size, or a candidate does not fit the token
//    budget), or when a preferred size can be formed (the largest one that fits), or when no
//    batch is being encoded (`batches_in_flight` == 0: then whatever was formed), or when the
//    oldest live sequence (of any level) has waited max_queue_delay (then whatever was formed);
//  - otherwise wait until the oldest sequence's delay runs out (or the earliest deadline, if
//    sooner).
// Waiting for company pays only while the encoders are busy: the sequences that arrive meanwhile
// would wait for the busy encoder anyway, and they join the next batch. With idle encoders the
// wait is pure latency (a lone request at low load paid all of max_queue_delay), so the batch goes
// at once; under load the encoders are rarely idle and batches form as before.
// With one level this is plain arrival order.
void decide_batch(const std::vector<QueuedSequence>& queue, Clock::time_point now,
                  const BatchPolicy& policy, int batches_in_flight, BatchDecision& decision);

// The queues (one per priority level) and their policy. Not thread-safe: the batcher's loop owns
// it. The per-level queues are consecutive segments of one array, level 1 first, each in arrival
// order: poll() hands decide_batch that array as it is, and nothing is allocated after
// construction (the array is reserved to max_queue_size, the bound on all levels together).
class DynamicBatcher {
 public:
  explicit DynamicBatcher(BatchPolicy policy);

  const BatchPolicy& policy() const { return policy_; }
  size_t size() const { return queue_.size(); }
  // Sequences queued at one level.
  size_t size(int priority) const;
  // When the longest-waiting sequence (any level) was queued; Clock::time_point::max() if none.
  Clock::time_point oldest() const;

  // Queues `sequence` at the end of its level. False (and nothing queued) when the queues hold
  // max_queue_size sequences (reply overloaded) or its priority is not in [1, priority_levels]
  // (the batcher checks it before).
  bool enqueue(const QueuedSequence& sequence);

  // Runs decide_batch (`batches_in_flight`: batches sent to encoders and not answered yet);
  // moves the batch (oldest first) into `batch` and the expired sequences into `expired`,
  // removing both from the queue. Returns the decision (its wait for kWait).
  const BatchDecision& poll(Clock::time_point now, int batches_in_flight,
                            std::vector<QueuedSequence>& batch,
                            std::vector<QueuedSequence>& expired);

  // Removes a queued sequence (cancellation); false when it is not queued.
  bool remove(uint64_t id);

 private:
  BatchPolicy policy_;
  std::vector<QueuedSequence>
      queue_;  // by level, then arrival order; capacity reserved to max_queue_size
  std::vector<bool> taken_;
  BatchDecision decision_;
};

}  // namespace seqpipe::batcher
