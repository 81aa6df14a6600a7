#include "batcher/dynamic_batcher.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace seqpipe::batcher {

void decide_batch(const std::vector<QueuedSequence>& queue, Clock::time_point now,
                  const BatchPolicy& policy, int batches_in_flight, BatchDecision& d,
                  Clock::duration service) {
  d.batch.clear();
  d.expired.clear();
  d.candidates.clear();
  d.wait = std::chrono::microseconds{0};
  const Clock::time_point too_late = now + service;  // a deadline before it cannot be met
  for (size_t i = 0; i < queue.size(); ++i) {
    if (queue[i].deadline <= too_late) {
      d.expired.push_back(i);
    } else {
      d.candidates.push_back(i);
    }
  }
  if (d.candidates.empty()) {
    d.action = BatchDecision::Action::kIdle;
    return;
  }
  // The oldest live sequence of the highest level anchors the batch; the others join by level,
  // then closest in length first (then oldest first), so a batch holds similar lengths and
  // nobody waits behind newer arrivals of its level forever.
  const size_t anchor = d.candidates.front();
  const int anchor_len = queue[anchor].tokens;
  Clock::time_point oldest = queue[anchor].enqueued;
  for (size_t c : d.candidates) oldest = std::min(oldest, queue[c].enqueued);
  std::stable_sort(d.candidates.begin() + 1, d.candidates.end(), [&](size_t a, size_t b) {
    if (queue[a].priority != queue[b].priority) return queue[a].priority < queue[b].priority;
    return std::abs(queue[a].tokens - anchor_len) < std::abs(queue[b].tokens - anchor_len);
  });

  int count = 0, longest = 0;
  bool budget_limited = false;  // a candidate did not fit the token budget: waiting cannot help it
  Clock::time_point earliest_deadline = Clock::time_point::max();
  for (size_t c : d.candidates) {
    earliest_deadline = std::min(earliest_deadline, queue[c].deadline);
    if (count == policy.max_batch_size) continue;
    const int len = std::max(longest, queue[c].tokens);
    if (count > 0 && int64_t{count + 1} * len > policy.max_batch_tokens) {
      budget_limited = true;
      continue;
    }
    longest = len;
    d.batch.push_back(c);
    ++count;
  }

  const bool full = count == policy.max_batch_size || budget_limited;
  int preferred = 0;
  for (int p : policy.preferred_batch_sizes) {
    if (p <= count) preferred = std::max(preferred, p);
  }
  const auto waited = now - oldest;
  if (full || batches_in_flight == 0) {
    // send the whole formed batch
  } else if (preferred > 0) {
    d.batch.resize(static_cast<size_t>(preferred));  // the `preferred` closest in length
  } else if (waited < policy.max_queue_delay) {
    d.action = BatchDecision::Action::kWait;
    // Until the delay runs out, or sooner when a queued sequence's deadline comes first (the
    // next decision then expires it).
    const auto until = std::min(oldest + policy.max_queue_delay, earliest_deadline);
    d.wait = std::chrono::duration_cast<std::chrono::microseconds>(until - now);
    if (d.wait.count() == 0) d.wait = std::chrono::microseconds{1};
    d.batch.clear();
    return;
  }
  std::sort(d.batch.begin(), d.batch.end());  // queue order: by level, then arrival
  d.action = BatchDecision::Action::kSend;
}

namespace {
// Recent samples weigh 1/8: a change of speed shows within a few dozen answers, one slow batch
// does not swing it.
constexpr double kWeight = 0.125;
Clock::duration ewma(const std::optional<Clock::duration>& old, Clock::duration sample) {
  if (!old) return sample;
  return std::chrono::duration_cast<Clock::duration>(*old + (sample - *old) * kWeight);
}
}  // namespace

void ServiceEstimate::answered(Clock::time_point now, int count, Clock::duration service,
                               size_t queued) {
  if (count <= 0) return;
  latency_ = ewma(latency_, service);
  if (paced_since_) per_sequence_ = ewma(per_sequence_, (now - *paced_since_) / count);
  paced_since_ = queued > 0 ? std::optional(now) : std::nullopt;
}

void ServiceEstimate::decoded_in(Clock::duration decode) {
  decode_latency_ = ewma(decode_latency_, decode);
}

Clock::time_point ServiceEstimate::finish(Clock::time_point now, size_t ahead) const {
  const Clock::duration per = per_sequence_.value_or(Clock::duration::zero());
  return now + latency_.value_or(Clock::duration::zero()) +
         per * static_cast<Clock::duration::rep>(ahead);
}

DynamicBatcher::DynamicBatcher(BatchPolicy policy) : policy_(std::move(policy)) {
  if (policy_.max_batch_size < 1)
    throw std::invalid_argument("BatchPolicy.max_batch_size must be >= 1");
  if (policy_.max_queue_size < 1)
    throw std::invalid_argument("BatchPolicy.max_queue_size must be >= 1");
  if (policy_.max_batch_tokens < 1)
    throw std::invalid_argument("BatchPolicy.max_batch_tokens must be >= 1");
  if (policy_.priority_levels < 1)
    throw std::invalid_argument("BatchPolicy.priority_levels must be >= 1");
  const size_t cap = static_cast<size_t>(policy_.max_queue_size);
  queue_.reserve(cap);
  taken_.reserve(cap);
  decision_.batch.reserve(static_cast<size_t>(policy_.max_batch_size));
  decision_.expired.reserve(cap);
  decision_.candidates.reserve(cap);
}

bool DynamicBatcher::enqueue(const QueuedSequence& sequence) {
  if (queue_.size() >= static_cast<size_t>(policy_.max_queue_size)) return false;
  if (sequence.priority < 1 || sequence.priority > policy_.priority_levels) return false;
  // The end of its level's segment: before the first sequence of a lower level.
  auto at =
      std::upper_bound(queue_.begin(), queue_.end(), sequence.priority,
                       [](int priority, const QueuedSequence& s) { return priority < s.priority; });
  queue_.insert(at, sequence);  // within the reserved capacity: no allocation
  return true;
}

size_t DynamicBatcher::size(int priority) const {
  return static_cast<size_t>(
      std::count_if(queue_.begin(), queue_.end(),
                    [priority](const QueuedSequence& s) { return s.priority == priority; }));
}

Clock::time_point DynamicBatcher::oldest() const {
  Clock::time_point oldest = Clock::time_point::max();
  for (const QueuedSequence& s : queue_) oldest = std::min(oldest, s.enqueued);
  return oldest;
}

const BatchDecision& DynamicBatcher::poll(Clock::time_point now, int batches_in_flight,
                                          std::vector<QueuedSequence>& batch,
                                          std::vector<QueuedSequence>& expired,
                                          Clock::duration service) {
  batch.clear();
  expired.clear();
  decide_batch(queue_, now, policy_, batches_in_flight, decision_, service);
  if (decision_.expired.empty() && decision_.action != BatchDecision::Action::kSend)
    return decision_;
  taken_.assign(queue_.size(), false);
  for (size_t i : decision_.expired) {
    expired.push_back(queue_[i]);
    taken_[i] = true;
  }
  if (decision_.action == BatchDecision::Action::kSend) {
    for (size_t i : decision_.batch) {
      batch.push_back(queue_[i]);
      taken_[i] = true;
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < queue_.size(); ++i) {
    if (!taken_[i]) queue_[kept++] = queue_[i];
  }
  queue_.resize(kept);
  return decision_;
}

bool DynamicBatcher::remove(uint64_t id) {
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [id](const QueuedSequence& s) { return s.id == id; });
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

}  // namespace seqpipe::batcher
