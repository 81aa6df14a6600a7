#pragma once
// Dynamic batching as Triton's dynamic_batch_scheduler does it: one class owns the queues (one
// per priority level) and the policy; the decision "send this batch now" or "wait N us" is a
// pure function of the queue and the clock (decide_batch), so it is unit-tested with an injected
// time.
#include <chrono>
#include <cstdint>
#include <optional>
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
//  - sequences that cannot finish in time are listed in `expired` and take no part: those past
//    their deadline, and those whose deadline comes before `now + service` (`service`: how long
//    a sequence takes from dispatch to its answer, ServiceEstimate::latency; 0: unknown);
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
                  const BatchPolicy& policy, int batches_in_flight, BatchDecision& decision,
                  Clock::duration service = Clock::duration::zero());

// How fast one model version's pipeline serves, measured by its batcher, for deadline-aware
// admission and dispatch: a sequence is admitted only if it can finish before its deadline
// behind the sequences queued ahead of it, and a queued sequence is dispatched only if it can
// still finish (a deadline missed by computing costs the compute and answers nobody). Pure: the
// batcher tells it what happened and when.
//  - latency(): EWMA of the time from a batch's dispatch to its sequences' decoded answers (the
//    encode, the wait for decoder slots and the decoding, under the load of the moment);
//  - per_sequence(): EWMA of the time between answers while sequences were queued (so the
//    pipeline, not the arrivals, set the pace): 1 / throughput. Not sampled at light load,
//    where the gaps measure the arrivals; until sampled, admission does not use it;
//  - decode_latency(): EWMA of the time from a sequence's dispatch to a decoder to its answer
//    (what an encoded sequence waiting for decoder slots still needs).
// The queue then never holds more than the pipeline can serve within the deadline: its bound
// is capacity x deadline, measured, and batcher.max_queue_size only caps memory.
class ServiceEstimate {
 public:
  // `count` sequences came back decoded at `now`, dispatched `service` ago on average;
  // `queued`: sequences still waiting (for a batch or for decoder slots) after them.
  void answered(Clock::time_point now, int count, Clock::duration service, size_t queued);
  // A sequence's time on a decoder, dispatch to answer.
  void decoded_in(Clock::duration decode);
  std::optional<Clock::duration> latency() const { return latency_; }
  std::optional<Clock::duration> decode_latency() const { return decode_latency_; }
  std::optional<Clock::duration> per_sequence() const { return per_sequence_; }
  // When a sequence queued now behind `ahead` others would be answered: now + latency + ahead x
  // per_sequence (the parts not measured yet count 0: admission errs towards admitting, and
  // dispatch drops what it let in and cannot finish).
  Clock::time_point finish(Clock::time_point now, size_t ahead) const;

 private:
  std::optional<Clock::duration> latency_, per_sequence_, decode_latency_;
  // The last answer after which sequences were still queued: the next gap is the pipeline's.
  std::optional<Clock::time_point> paced_since_;
};

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

  // Runs decide_batch (`batches_in_flight`: batches sent to encoders and not answered yet;
  // `service`: its service time); moves the batch (oldest first) into `batch` and the expired
  // sequences into `expired`, removing both from the queue. Returns the decision (its wait for
  // kWait).
  const BatchDecision& poll(Clock::time_point now, int batches_in_flight,
                            std::vector<QueuedSequence>& batch,
                            std::vector<QueuedSequence>& expired,
                            Clock::duration service = Clock::duration::zero());

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
