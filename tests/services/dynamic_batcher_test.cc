// The batching decision on an injected clock: no sockets, no sleeps.
#include "batcher/dynamic_batcher.h"

#include <gtest/gtest.h>

namespace seqpipe::batcher {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Action = BatchDecision::Action;

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
// Batches being encoded when the decision is made: none, or one (waiting for company pays).
constexpr int kIdle = 0;
constexpr int kBusy = 1;

QueuedSequence seq(uint64_t id, int tokens, microseconds enqueued_after = microseconds{0},
                   milliseconds deadline_after = milliseconds{1000}) {
  return {id, tokens, t0 + enqueued_after, t0 + enqueued_after + deadline_after};
}

BatchPolicy policy(int max = 32, std::vector<int> preferred = {8, 16, 32}, int delay_us = 2000,
                   int tokens = 4096) {
  return {max, std::move(preferred), microseconds{delay_us}, tokens, 1024};
}

std::vector<uint64_t> ids(const std::vector<QueuedSequence>& q, const std::vector<size_t>& idx) {
  std::vector<uint64_t> out;
  for (size_t i : idx) out.push_back(q[i].id);
  return out;
}

TEST(DynamicBatcherDecision, EmptyQueueIsIdle) {
  BatchDecision d;
  decide_batch({}, t0, policy(), kBusy, d);
  EXPECT_EQ(d.action, Action::kIdle);
}

TEST(DynamicBatcherDecision, LoneSequenceWaitsForTheDelayThenGoesAlone) {
  std::vector<QueuedSequence> q = {seq(1, 9)};
  BatchDecision d;
  decide_batch(q, t0 + microseconds{500}, policy(), kBusy, d);
  EXPECT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.wait, microseconds{1500});
  decide_batch(q, t0 + microseconds{2000}, policy(), kBusy, d);
  EXPECT_EQ(d.action, Action::kSend);
  EXPECT_EQ(ids(q, d.batch), std::vector<uint64_t>{1});
}

TEST(DynamicBatcherDecision, WithIdleEncodersWhatIsQueuedGoesAtOnce) {
  // Nothing being encoded: a lone sequence does not wait for company that would only add latency.
  std::vector<QueuedSequence> q = {seq(1, 9)};
  BatchDecision d;
  decide_batch(q, t0, policy(), kIdle, d);
  ASSERT_EQ(d.action, Action::kSend);
  EXPECT_EQ(ids(q, d.batch), std::vector<uint64_t>{1});
  // Everything formed goes, not only a preferred size of it.
  q.clear();
  for (uint64_t i = 0; i < 11; ++i) q.push_back(seq(i, 9, microseconds{int(i)}));
  decide_batch(q, t0 + microseconds{20}, policy(), kIdle, d);
  ASSERT_EQ(d.action, Action::kSend);
  EXPECT_EQ(d.batch.size(), 11u);
  // The limits still hold: max_batch_size and the token budget.
  decide_batch(q, t0 + microseconds{20}, policy(/*max=*/4, {}), kIdle, d);
  EXPECT_EQ(d.batch.size(), 4u);
  decide_batch(q, t0 + microseconds{20}, policy(32, {}, 2000, 27), kIdle, d);
  EXPECT_EQ(d.batch.size(), 3u);
  // Expired sequences are still set apart; with only those, nothing goes.
  q = {seq(1, 9, microseconds{0}, milliseconds{1})};
  decide_batch(q, t0 + milliseconds{2}, policy(), kIdle, d);
  EXPECT_EQ(d.action, Action::kIdle);
  EXPECT_EQ(ids(q, d.expired), std::vector<uint64_t>{1});
}

TEST(DynamicBatcherDecision, WhileABatchIsEncodedArrivalsWaitAndGoWhenTheEncoderIsFree) {
  std::vector<QueuedSequence> q = {seq(1, 9), seq(2, 9, microseconds{300})};
  BatchDecision d;
  decide_batch(q, t0 + microseconds{400}, policy(), kBusy, d);
  ASSERT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.wait, microseconds{1600});
  // The batch in flight came back before the delay ran out: both go now, together.
  decide_batch(q, t0 + microseconds{900}, policy(), kIdle, d);
  ASSERT_EQ(d.action, Action::kSend);
  EXPECT_EQ(ids(q, d.batch), (std::vector<uint64_t>{1, 2}));
}

TEST(DynamicBatcherDecision, PreferredSizeGoesAtOnceWithoutWaiting) {
  std::vector<QueuedSequence> q;
  for (uint64_t i = 0; i < 9; ++i) q.push_back(seq(i, 9, microseconds{int(i)}));
  BatchDecision d;
  decide_batch(q, t0 + microseconds{10}, policy(), kBusy, d);
  ASSERT_EQ(d.action, Action::kSend);
  EXPECT_EQ(d.batch.size(), 8u);  // the largest preferred size that fits
  EXPECT_EQ(d.batch.front(), 0u) << "the oldest sequence is always in the batch";
}

TEST(DynamicBatcherDecision, MaxBatchSizeCapsTheBatch) {
  std::vector<QueuedSequence> q;
  for (uint64_t i = 0; i < 40; ++i) q.push_back(seq(i, 5));
  BatchDecision d;
  decide_batch(q, t0, policy(/*max=*/20, /*preferred=*/{}), kBusy, d);
  ASSERT_EQ(d.action, Action::kSend);
  EXPECT_EQ(d.batch.size(), 20u);
}

TEST(DynamicBatcherDecision, TokenBudgetIncludesPaddingAndSendsAtOnce) {
  // 4 x 10 tokens fit a budget of 40; a fifth does not, so waiting cannot grow the batch.
  std::vector<QueuedSequence> q;
  for (uint64_t i = 0; i < 6; ++i) q.push_back(seq(i, 10));
  BatchDecision d;
  decide_batch(q, t0, policy(32, {}, 2000, 40), kBusy, d);
  ASSERT_EQ(d.action, Action::kSend);
  EXPECT_EQ(d.batch.size(), 4u);
  // Padding counts: a 20-token sequence makes every row cost 20.
  q = {seq(1, 20), seq(2, 5), seq(3, 5)};
  decide_batch(q, t0, policy(32, {}, 2000, 40), kBusy, d);
  ASSERT_EQ(d.action, Action::kSend);
  EXPECT_EQ(ids(q, d.batch), (std::vector<uint64_t>{1, 2}));
}

TEST(DynamicBatcherDecision, OversizedSequenceStillGoesAlone) {
  std::vector<QueuedSequence> q = {seq(1, 100), seq(2, 100)};
  BatchDecision d;
  decide_batch(q, t0, policy(32, {}, 2000, 64), kBusy, d);
  ASSERT_EQ(d.action, Action::kSend);
  EXPECT_EQ(ids(q, d.batch), std::vector<uint64_t>{1});
}

TEST(DynamicBatcherDecision, GroupsSimilarLengthsAroundTheOldest) {
  std::vector<QueuedSequence> q = {seq(1, 5), seq(2, 50), seq(3, 6), seq(4, 48),
                                   seq(5, 4), seq(6, 5),  seq(7, 51)};
  BatchDecision d;
  decide_batch(q, t0, policy(32, {4}), kBusy, d);
  ASSERT_EQ(d.action, Action::kSend);
  EXPECT_EQ(ids(q, d.batch), (std::vector<uint64_t>{1, 3, 5, 6}));  // arrival order, lengths 4..6
}

TEST(DynamicBatcherDecision, ExpiredSequencesAreListedAndNotBatched) {
  std::vector<QueuedSequence> q = {seq(1, 9, microseconds{0}, milliseconds{1}), seq(2, 9),
                                   seq(3, 9)};
  BatchDecision d;
  decide_batch(q, t0 + milliseconds{5}, policy(32, {}, 2000), kBusy, d);
  EXPECT_EQ(ids(q, d.expired), std::vector<uint64_t>{1});
  ASSERT_EQ(d.action, Action::kSend);  // the oldest live one (id 2) has waited 5 ms > 2 ms
  EXPECT_EQ(ids(q, d.batch), (std::vector<uint64_t>{2, 3}));
}

TEST(DynamicBatcherDecision, WaitEndsNoLaterThanTheEarliestDeadline) {
  std::vector<QueuedSequence> q = {seq(1, 9, microseconds{0}, milliseconds{50}),
                                   seq(2, 9, microseconds{0}, milliseconds{1})};
  BatchDecision d;
  decide_batch(q, t0 + microseconds{200}, policy(32, {}, 10000), kBusy, d);
  ASSERT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.wait, microseconds{800});
}

TEST(DynamicBatcher, QueueIsBoundedAndPollRemovesWhatItReturns) {
  BatchPolicy p = policy(32, {2}, 2000);
  p.max_queue_size = 3;
  DynamicBatcher b(p);
  EXPECT_TRUE(b.enqueue(seq(1, 9, microseconds{0}, milliseconds{1})));
  EXPECT_TRUE(b.enqueue(seq(2, 9)));
  EXPECT_TRUE(b.enqueue(seq(3, 30)));
  EXPECT_FALSE(b.enqueue(seq(4, 9))) << "a full queue refuses: the gateway answers overloaded";
  std::vector<QueuedSequence> batch, expired;
  const BatchDecision& d = b.poll(t0 + milliseconds{2}, kBusy, batch, expired);
  EXPECT_EQ(d.action, Action::kSend);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].id, 1u);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].id, 2u);
  EXPECT_EQ(batch[1].id, 3u);
  EXPECT_EQ(b.size(), 0u);
  EXPECT_TRUE(b.enqueue(seq(5, 9)));
  EXPECT_TRUE(b.remove(5));
  EXPECT_FALSE(b.remove(5));
  EXPECT_EQ(b.poll(t0, kBusy, batch, expired).action, Action::kIdle);
}

QueuedSequence at(int priority, uint64_t id, int tokens,
                  microseconds enqueued_after = microseconds{0}) {
  QueuedSequence s = seq(id, tokens, enqueued_after);
  s.priority = priority;
  return s;
}

TEST(DynamicBatcher, HigherPriorityOvertakesQueuedLowerPriority) {
  BatchPolicy p = policy(4, {4}, 2000);
  p.priority_levels = 3;
  DynamicBatcher b(p);
  // Six low-priority sequences wait (say, no encoder had credit); then three urgent ones arrive.
  for (uint64_t i = 1; i <= 6; ++i) ASSERT_TRUE(b.enqueue(at(3, i, 9, microseconds{int(i)})));
  ASSERT_TRUE(b.enqueue(at(1, 101, 30, microseconds{100})));
  ASSERT_TRUE(b.enqueue(at(2, 201, 9, microseconds{110})));
  ASSERT_TRUE(b.enqueue(at(1, 102, 9, microseconds{120})));
  EXPECT_EQ(b.size(1), 2u);
  EXPECT_EQ(b.size(2), 1u);
  EXPECT_EQ(b.size(3), 6u);
  std::vector<QueuedSequence> batch, expired;
  ASSERT_EQ(b.poll(t0 + microseconds{200}, kBusy, batch, expired).action, Action::kSend);
  std::vector<uint64_t> got;
  for (const auto& s : batch) got.push_back(s.id);
  // Level 1 first (though level 3 has a length closer to the anchor's), then level 2, then the
  // oldest of level 3 closest in length.
  EXPECT_EQ(got, (std::vector<uint64_t>{101, 102, 201, 1}));
  ASSERT_EQ(b.poll(t0 + microseconds{200}, kBusy, batch, expired).action, Action::kSend);
  got.clear();
  for (const auto& s : batch) got.push_back(s.id);
  EXPECT_EQ(got, (std::vector<uint64_t>{2, 3, 4, 5}));
  EXPECT_EQ(b.size(), 1u);
}

TEST(DynamicBatcher, LevelsShareTheQueueBoundAndTheDelayCountsFromTheOldestOfAnyLevel) {
  BatchPolicy p = policy(8, {8}, 2000);
  p.priority_levels = 2;
  p.max_queue_size = 3;
  DynamicBatcher b(p);
  EXPECT_TRUE(b.enqueue(at(2, 1, 9)));
  EXPECT_TRUE(b.enqueue(at(2, 2, 9)));
  EXPECT_TRUE(b.enqueue(at(1, 3, 9, microseconds{1500})));
  EXPECT_FALSE(b.enqueue(at(1, 4, 9))) << "max_queue_size bounds all levels together";
  EXPECT_FALSE(DynamicBatcher(p).enqueue(at(3, 5, 9))) << "no level 3";
  EXPECT_FALSE(DynamicBatcher(p).enqueue(at(0, 5, 9))) << "no level 0";
  std::vector<QueuedSequence> batch, expired;
  // The urgent one anchors the batch, but the low ones' wait began at t0: 500 us left, not 2000.
  const BatchDecision& d = b.poll(t0 + microseconds{1500}, kBusy, batch, expired);
  ASSERT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.wait, microseconds{500});
  ASSERT_EQ(b.poll(t0 + microseconds{2000}, kBusy, batch, expired).action, Action::kSend);
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0].id, 3u);
}

TEST(DynamicBatcher, InvalidPolicyIsRefusedAtStartUp) {
  EXPECT_THROW(DynamicBatcher(policy(0)), std::invalid_argument);
  EXPECT_THROW(DynamicBatcher(policy(8, {}, 100, 0)), std::invalid_argument);
  BatchPolicy no_levels = policy();
  no_levels.priority_levels = 0;
  EXPECT_THROW(DynamicBatcher{no_levels}, std::invalid_argument);
}

TEST(DynamicBatcherDecision, SequencesThatCannotBeServedInTimeAreExpiredNotBatched) {
  // Serving takes 300 ms: a sequence due in 200 ms cannot make it, one due in 1 s can.
  std::vector<QueuedSequence> q = {seq(1, 9, microseconds{0}, milliseconds{200}),
                                   seq(2, 9, microseconds{0}, milliseconds{1000})};
  BatchDecision d;
  decide_batch(q, t0, policy(), kIdle, d, milliseconds{300});
  ASSERT_EQ(d.action, Action::kSend);
  EXPECT_EQ(ids(q, d.batch), std::vector<uint64_t>{2});
  EXPECT_EQ(ids(q, d.expired), std::vector<uint64_t>{1});
  // Without a service time (none measured) only deadlines passed count.
  decide_batch(q, t0, policy(), kIdle, d);
  EXPECT_EQ(d.batch.size(), 2u);
  EXPECT_TRUE(d.expired.empty());
}

TEST(ServiceEstimate, LatencyIsAnAverageOfRecentServiceTimes) {
  ServiceEstimate e;
  EXPECT_FALSE(e.latency());
  EXPECT_EQ(e.finish(t0, 10), t0);  // nothing measured: nothing refused
  e.answered(t0, 1, milliseconds{100}, 0);
  EXPECT_EQ(*e.latency(), milliseconds{100});
  e.answered(t0 + milliseconds{10}, 1, milliseconds{180}, 0);
  EXPECT_EQ(*e.latency(), milliseconds{110});  // one sample weighs 1/8
  EXPECT_FALSE(e.per_sequence());              // nothing was queued: the gaps are the arrivals'
  EXPECT_EQ(e.finish(t0, 10), t0 + milliseconds{110});
}

TEST(ServiceEstimate, ThePaceIsMeasuredOnlyWhileSequencesWait) {
  ServiceEstimate e;
  e.answered(t0, 2, milliseconds{100}, /*queued=*/5);
  EXPECT_FALSE(e.per_sequence());  // the first gap starts here
  e.answered(t0 + milliseconds{40}, 4, milliseconds{100}, 3);
  EXPECT_EQ(*e.per_sequence(), milliseconds{10});              // 4 answered in 40 ms
  e.answered(t0 + milliseconds{60}, 0, milliseconds{100}, 3);  // nothing answered: no sample
  EXPECT_EQ(*e.per_sequence(), milliseconds{10});
  e.answered(t0 + milliseconds{500}, 1, milliseconds{100}, 0);  // the gap ran while 3 waited
  EXPECT_EQ(*e.per_sequence(),
            Clock::duration(milliseconds{10}) + Clock::duration(milliseconds{450}) / 8);
  const auto per = *e.per_sequence();
  e.answered(t0 + milliseconds{900}, 1, milliseconds{100}, 0);  // nothing waited: an idle gap
  EXPECT_EQ(*e.per_sequence(), per);
  // A sequence behind 20 others: served once they are, then its own service time.
  EXPECT_EQ(e.finish(t0, 20), t0 + *e.latency() + 20 * per);
}

}  // namespace
}  // namespace seqpipe::batcher
