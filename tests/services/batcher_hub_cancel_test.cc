// The batcher hub's cancels and deadlines, on an injected clock, no sockets
// (batcher_hub_fixture.h): a cancel drops queued and later work and frees decoder slots; expired
// items are dropped.
#include <gtest/gtest.h>

#include "batcher_hub_fixture.h"

namespace seqpipe::batcher {
namespace {

stage::StageMessage cancel_of(uint64_t request) {
  const stage::SequenceItem w = item(request);
  return stage::Cancel{{{w.request, w.gateway, w.deadline}}};
}

TEST_F(BatcherHubTest, ACancelDropsQueuedWorkAndWorkThatArrivesLater) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_sequences(sequences({item(1), item(2), item(3)}), t0, out);
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Encoded{0, {encoded(4), encoded(5)}}, t0);
  EXPECT_EQ(h.queued(), 5u);
  h.on_sequences(cancel_of(2), t0, out);  // waiting for a batch
  h.on_sequences(cancel_of(4), t0, out);  // waiting for a decoder
  h.on_sequences(cancel_of(9), t0, out);  // still at a tokenizer
  EXPECT_EQ(h.queued(), 3u);
  EXPECT_TRUE(out.sends.empty());
  EXPECT_TRUE(out.pushes.empty());  // the gateway answered `cancelled` itself
  h.on_sequences(sequences({item(9), item(6)}), t0, out);  // 9 arrives after its cancel: dropped
  EXPECT_EQ(h.queued(), 4u);
  h.on_worker(Role::kDecoder, "d", stage::Ready{8}, t0);
  h.dispatch(t0, out);
  auto batches = sent(out, Role::kEncoder);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(requests(batches[0].message), (std::vector<uint64_t>{1, 3}));
  auto decodes = sent(out, Role::kDecoder);
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(requests(decodes[0].message), (std::vector<uint64_t>{5}));
  // A request cancelled while its batch is at an encoder: its encoded item goes no further.
  h.on_sequences(cancel_of(3), t0, out);
  out.clear();
  h.on_worker(Role::kEncoder, "e", encoded_batch(batches[0].message, 1), t0);
  h.dispatch(t0, out);
  decodes = sent(out, Role::kDecoder);
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(requests(decodes[0].message), (std::vector<uint64_t>{1}));
}

TEST_F(BatcherHubTest, ACancelReachesTheDecoderRunningTheSequenceAndItsSlotsComeBack) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.on_worker(Role::kDecoder, "d1", stage::Ready{4}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Encoded{0, {encoded(1, 5, 2), encoded(2, 5, 2)}}, t0);
  h.dispatch(t0, out);
  ASSERT_EQ(sent(out, Role::kDecoder).size(), 1u);
  EXPECT_EQ(h.credits(Role::kDecoder).free_credits("d1"), 0);
  out.clear();
  h.on_sequences(cancel_of(2), t0, out);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].link, link(Role::kDecoder));
  EXPECT_EQ(out.sends[0].peer, "d1");
  EXPECT_EQ(stage::kind(out.sends[0].message), stage::MessageKind::kCancel);
  EXPECT_EQ(requests(out.sends[0].message), (std::vector<uint64_t>{2}));
  // The decoder stops it and returns its two slots without an item.
  h.on_worker(Role::kDecoder, "d1", stage::Decoded{2, {}}, t0);
  EXPECT_EQ(h.credits(Role::kDecoder).free_credits("d1"), 2);
  // If d1 dies now, only request 1 is re-dispatched: the cancelled one left its record.
  h.on_worker(Role::kDecoder, "d2", stage::Ready{4}, t0);
  out.clear();
  h.worker_dead(Role::kDecoder, "d1", t0, out);
  h.dispatch(t0, out);
  auto again = sent(out, Role::kDecoder);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(requests(again[0].message), (std::vector<uint64_t>{1}));
  // A decoder that finished the cancelled sequence before the cancel reached it: dropped.
  h.on_worker(Role::kDecoder, "d2", stage::Decoded{0, {decoded(encoded(2, 5, 2))}}, t0);
  EXPECT_EQ(h.queued(), 0u);
}

TEST_F(BatcherHubTest, ExpiredItemsWaitingForADecoderAreDroppedWithoutCostingSlots) {
  BatcherHub& h = hub();
  Outbox out;
  stage::EncodedItem old = encoded(1);
  old.deadline = Deadline::at_unix_us(t0.unix_us - 1000);
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Encoded{1, {old, encoded(2)}}, t0);
  h.on_worker(Role::kDecoder, "d", stage::Ready{4}, t0);
  h.dispatch(t0, out);
  auto decodes = sent(out, Role::kDecoder);
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(requests(decodes[0].message), (std::vector<uint64_t>{2}));
  EXPECT_EQ(h.credits(Role::kDecoder).free_credits("d"), 3);
  EXPECT_EQ(h.queued(), 0u);
}

TEST_F(BatcherHubTest, DeadlinesAreReadOnTheWallClockOfTheMomentGiven) {
  BatcherHub& h = hub();
  Outbox out;
  stage::SequenceItem soon = item(1), later = item(2);
  soon.deadline = Deadline::after(t0, milliseconds(10));
  // Queued 5 ms in: 5 ms left on the wall clock, whatever the process's steady clock reads.
  h.on_sequences(sequences({soon, later}), t0 + milliseconds(5), out);
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.dispatch(t0 + milliseconds(10), out);  // the queue delay (1 ms) is over; `soon` has expired
  auto batches = sent(out, Role::kEncoder);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(requests(batches[0].message), (std::vector<uint64_t>{2}));
  EXPECT_TRUE(out.pushes.empty());  // its gateway answers deadline_exceeded itself
}

}  // namespace
}  // namespace seqpipe::batcher
