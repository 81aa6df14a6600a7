// The batcher hub on an injected clock, no sockets (batcher_hub_fixture.h): batches only to
// encoders with credit, decoders charged num_beams slots, credits returned re-enable dispatch,
// dead workers' work, streamed partials, gateways' heartbeats, odd messages.
#include <gtest/gtest.h>

#include "batcher_hub_fixture.h"

namespace seqpipe::batcher {
namespace {

TEST_F(BatcherHubTest, BatchesGoOnlyToEncodersWithCredit) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_sequences(sequences({item(1), item(2), item(3), item(4)}), t0, out);
  h.dispatch(t0, out);
  EXPECT_TRUE(out.sends.empty());  // no encoder yet: the queue keeps them
  h.on_worker(Role::kEncoder, "e1", stage::Ready{1}, t0);
  h.on_worker(Role::kEncoder, "e2", stage::Ready{1}, t0);
  h.dispatch(t0, out);
  auto batches = sent(out, Role::kEncoder);
  ASSERT_EQ(batches.size(), 2u);  // one batch (preferred size 2) per encoder credit
  EXPECT_NE(batches[0].peer, batches[1].peer);
  EXPECT_EQ(stage::kind(batches[0].message), stage::MessageKind::kEncode);
  EXPECT_EQ(requests(batches[0].message), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(requests(batches[1].message), (std::vector<uint64_t>{3, 4}));
  out.clear();
  h.on_sequences(sequences({item(5), item(6)}), t0, out);
  h.dispatch(t0, out);
  EXPECT_TRUE(sent(out, Role::kEncoder).empty());  // both encoders busy
  h.on_worker(Role::kEncoder, batches[0].peer, encoded_batch(batches[0].message, 1), t0);
  h.dispatch(t0, out);
  ASSERT_EQ(sent(out, Role::kEncoder).size(), 1u);
  EXPECT_EQ(sent(out, Role::kEncoder)[0].peer, batches[0].peer);
}

TEST_F(BatcherHubTest, DecodersAreChargedNumBeamsSlots) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.on_worker(Role::kDecoder, "d", stage::Ready{2}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Encoded{0, {encoded(1, 5, 4), encoded(2)}}, t0);
  h.dispatch(t0, out);
  EXPECT_TRUE(
      sent(out, Role::kDecoder).empty());  // 4 beams > 2 free slots; in order, item 2 waits too
  h.on_worker(Role::kDecoder, "d2", stage::Ready{8}, t0);
  h.dispatch(t0, out);
  auto decodes = sent(out, Role::kDecoder);
  ASSERT_EQ(decodes.size(), 1u);  // both items to the one with slots, in one message
  EXPECT_EQ(decodes[0].peer, "d2");
  EXPECT_EQ(requests(decodes[0].message), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(h.credits(Role::kDecoder).free_credits("d2"), 3);
  // Finishing returns the slots; the decoded item goes to a postprocessor with credit.
  h.on_worker(Role::kPostprocessor, "p", stage::Ready{1}, t0);
  h.on_worker(Role::kDecoder, "d2",
              stage::Decoded{4, {decoded(as<stage::Decode>(decodes[0].message).items[0])}}, t0);
  EXPECT_EQ(h.credits(Role::kDecoder).free_credits("d2"), 7);
  out.clear();
  h.dispatch(t0, out);
  auto posts = sent(out, Role::kPostprocessor);
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(stage::kind(posts[0].message), stage::MessageKind::kPostprocess);
  EXPECT_EQ(requests(posts[0].message), (std::vector<uint64_t>{1}));
}

TEST_F(BatcherHubTest, FullQueueAnswersOverloadedToTheItemsGateway) {
  config_.batcher.max_queue_size = 2;
  BatcherHub& h = hub();
  Outbox out;
  h.on_sequences(sequences({item(1), item(2), item(3)}), t0, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(out.pushes[0].first, "ipc:///tmp/gw.sock");
  const auto& failed = as<stage::Result>(out.pushes[0].second).items.at(0);
  EXPECT_EQ(failed.request, 3u);
  EXPECT_EQ(failed.error->code, protocol::ErrorCode::kOverloaded);
}

TEST_F(BatcherHubTest, ADeadEncodersBatchGoesToAnotherOnceThenUnavailable) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_worker(Role::kEncoder, "e1", stage::Ready{1}, t0);
  h.on_sequences(sequences({item(1), item(2)}), t0, out);
  h.dispatch(t0, out);
  ASSERT_EQ(sent(out, Role::kEncoder).at(0).peer, "e1");
  h.on_worker(Role::kEncoder, "e2", stage::Ready{1}, t0 + milliseconds(250));
  out.clear();
  h.tick(t0 + milliseconds(301), out);  // e1 silent for 3 intervals
  h.dispatch(t0 + milliseconds(301), out);
  auto again = sent(out, Role::kEncoder);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].peer, "e2");
  EXPECT_EQ(requests(again[0].message), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(out.pushes.empty());
  // e1 wakes up and answers: its late items go nowhere.
  h.on_worker(Role::kEncoder, "e1", encoded_batch(again[0].message, 1), t0 + milliseconds(310));
  out.clear();
  h.worker_dead(Role::kEncoder, "e2", t0 + milliseconds(320), out);  // lost twice
  ASSERT_EQ(out.pushes.size(), 2u);
  for (const auto& [gw, m] : out.pushes)
    EXPECT_EQ(as<stage::Result>(m).items.at(0).error->code, protocol::ErrorCode::kUnavailable);
  EXPECT_EQ(h.queued(), 0u);  // nothing was forwarded to the decoders
}

TEST_F(BatcherHubTest, ADecoderThatLeavesWithoutOthersAnswersUnavailable) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_worker(Role::kDecoder, "d", stage::Ready{4}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Encoded{0, {encoded(1)}}, t0);
  h.dispatch(t0, out);
  ASSERT_EQ(sent(out, Role::kDecoder).size(), 1u);
  out.clear();
  h.worker_dead(Role::kDecoder, "d", t0, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items[0].error->code,
            protocol::ErrorCode::kUnavailable);
  EXPECT_EQ(h.credits(Role::kDecoder).size(), 0u);
}

TEST_F(BatcherHubTest, UnexpectedKindsFromWorkersAreIgnored) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_worker(Role::kPostprocessor, "p", stage::Ready{1}, t0);
  h.on_worker(Role::kPostprocessor, "p", stage::Encoded{0, {encoded(1)}}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Decoded{0, {decoded(encoded(2))}}, t0);
  h.dispatch(t0, out);
  EXPECT_TRUE(out.sends.empty());
  EXPECT_EQ(h.queued(), 0u);
}

TEST_F(BatcherHubTest, ALoneSequenceGoesToAnIdleEncoderAtOnceAndWaitsBehindABusyOne) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_worker(Role::kEncoder, "e", stage::Ready{3}, t0);
  h.on_sequences(sequences({item(1)}), t0, out);
  h.dispatch(t0 + std::chrono::microseconds(50), out);
  auto batches = sent(out, Role::kEncoder);
  ASSERT_EQ(batches.size(), 1u) << "nothing is being encoded: waiting for company is pure delay";
  EXPECT_EQ(as<stage::Encode>(batches[0].message).items[0].timings.batch_wait_us, 50u);
  const stage::StageMessage batch1 = batches[0].message;
  // While that batch is encoded, the next lone sequence waits for company up to the delay...
  out.clear();
  h.on_sequences(sequences({item(2)}), t0, out);
  h.dispatch(t0 + std::chrono::microseconds(200), out);
  EXPECT_TRUE(sent(out, Role::kEncoder).empty());
  EXPECT_EQ(h.next_wakeup(), std::chrono::microseconds(800));
  h.dispatch(t0 + std::chrono::microseconds(1000), out);
  batches = sent(out, Role::kEncoder);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(requests(batches[0].message), (std::vector<uint64_t>{2}));
  EXPECT_EQ(as<stage::Encode>(batches[0].message).items[0].timings.batch_wait_us, 1000u);
  const stage::StageMessage batch2 = batches[0].message;
  // ...or until the encoder is free again, whichever comes first.
  out.clear();
  h.on_sequences(sequences({item(3)}), t0 + std::chrono::microseconds(1000), out);
  h.dispatch(t0 + std::chrono::microseconds(1100), out);
  EXPECT_TRUE(sent(out, Role::kEncoder).empty());
  h.on_worker(Role::kEncoder, "e", encoded_batch(batch1, 1), t0);
  h.on_worker(Role::kEncoder, "e", encoded_batch(batch2, 1), t0);
  h.dispatch(t0 + std::chrono::microseconds(1300), out);
  batches = sent(out, Role::kEncoder);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(requests(batches[0].message), (std::vector<uint64_t>{3}));
  EXPECT_EQ(as<stage::Encode>(batches[0].message).items[0].timings.batch_wait_us, 300u);
}

TEST_F(BatcherHubTest, ADeadDecodersItemGoesToAnotherAndItsLateAnswerIsDropped) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.on_worker(Role::kDecoder, "d1", stage::Ready{2}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Encoded{1, {encoded(1, 5, 2)}}, t0);
  h.dispatch(t0, out);
  ASSERT_EQ(sent(out, Role::kDecoder).size(), 1u);
  ASSERT_EQ(sent(out, Role::kDecoder)[0].peer, "d1");
  h.on_worker(Role::kDecoder, "d2", stage::Ready{2}, t0);
  out.clear();
  h.worker_dead(Role::kDecoder, "d1", t0, out);
  EXPECT_TRUE(out.pushes.empty());
  EXPECT_EQ(h.credits(Role::kDecoder).free_credits("d1"), -1);
  h.dispatch(t0, out);
  auto again = sent(out, Role::kDecoder);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].peer, "d2");
  EXPECT_EQ(requests(again[0].message), (std::vector<uint64_t>{1}));
  EXPECT_EQ(h.credits(Role::kDecoder).free_credits("d2"), 0);
  // d1 was only stopped: its answer arrives after all and goes no further.
  const stage::DecodedItem done = decoded(as<stage::Decode>(again[0].message).items[0]);
  h.on_worker(Role::kDecoder, "d1", stage::Decoded{2, {done}}, t0);
  EXPECT_EQ(h.queued(), 0u);
  // d2's answer goes on to the postprocessors and frees its slots.
  h.on_worker(Role::kDecoder, "d2", stage::Decoded{2, {done}}, t0);
  EXPECT_EQ(h.queued(), 1u);
  EXPECT_EQ(h.credits(Role::kDecoder).free_credits("d2"), 2);
  // A duplicate of an item already answered is dropped too.
  h.on_worker(Role::kDecoder, "d2", stage::Decoded{0, {done}}, t0);
  EXPECT_EQ(h.queued(), 1u);
}

// A streamed sequence's partials go on to the postprocessors without answering the decoder's
// item (its final answer still does), and a newer partial replaces one still waiting.
TEST_F(BatcherHubTest, PartialsGoOnWithoutAnsweringAndTheNewestReplacesAWaitingOne) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.on_worker(Role::kDecoder, "d1", stage::Ready{2}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Encoded{1, {encoded(1)}}, t0);
  h.dispatch(t0, out);
  ASSERT_EQ(sent(out, Role::kDecoder).size(), 1u);
  stage::DecodedItem partial =
      decoded(as<stage::Decode>(sent(out, Role::kDecoder)[0].message).items[0]);
  partial.partial = true;
  partial.ids = {0, 5};
  h.on_worker(Role::kDecoder, "d1", stage::Decoded{0, {partial}}, t0);
  partial.ids = {0, 5, 6};
  h.on_worker(Role::kDecoder, "d1", stage::Decoded{0, {partial}}, t0);
  EXPECT_EQ(h.queued(), 1u);  // no postprocessor yet: the newer partial took the older's place
  stage::DecodedItem done = partial;
  done.partial = false;
  done.ids = {0, 5, 6, 1};
  h.on_worker(Role::kDecoder, "d1", stage::Decoded{1, {done}}, t0);  // still the item's answer
  EXPECT_EQ(h.queued(), 2u);
  EXPECT_EQ(h.credits(Role::kDecoder).free_credits("d1"), 2);
  h.on_worker(Role::kPostprocessor, "p", stage::Ready{4}, t0);
  out.clear();
  h.dispatch(t0, out);
  const auto posts = sent(out, Role::kPostprocessor);
  ASSERT_EQ(posts.size(), 1u);
  const auto& items = as<stage::Postprocess>(posts[0].message).items;
  ASSERT_EQ(items.size(), 2u);
  EXPECT_TRUE(items[0].partial);
  EXPECT_EQ(items[0].ids, (std::vector<int32_t>{0, 5, 6}));
  EXPECT_FALSE(items[1].partial);
}

TEST_F(BatcherHubTest, GatewaysThatHeartbeatAreAnsweredWithThisBatchersIngress) {
  config_.batcher.ingress_endpoint = "ipc:///tmp/b1-in.sock";
  BatcherHub& h = hub();
  Outbox out;
  h.tick(t0, out);
  EXPECT_TRUE(out.pushes.empty());  // no gateway heard from yet
  h.on_sequences(stage::Heartbeat{"ipc:///tmp/gw.sock"}, t0, out);
  EXPECT_EQ(h.queued(), 0u);
  h.tick(t0 + milliseconds(1), out);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(out.pushes[0].first, "ipc:///tmp/gw.sock");
  EXPECT_EQ(stage::kind(out.pushes[0].second), stage::MessageKind::kHeartbeat);
  EXPECT_EQ(as<stage::Heartbeat>(out.pushes[0].second).from, "ipc:///tmp/b1-in.sock");
  h.tick(t0 + milliseconds(50), out);
  EXPECT_EQ(out.pushes.size(), 1u);      // once per heartbeat interval (100 ms)
  h.tick(t0 + milliseconds(2000), out);  // silent for 10 intervals: forgotten
  EXPECT_EQ(out.pushes.size(), 1u);
  // Its incarnation is drawn at start: another run of the batcher has another.
  const uint64_t incarnation = as<stage::Heartbeat>(out.pushes[0].second).incarnation;
  EXPECT_NE(incarnation, 0u);
  BatcherHub second(config_.batcher, config_.liveness, metrics_);
  second.on_sequences(stage::Heartbeat{"ipc:///tmp/gw.sock"}, t0, out);
  out.clear();
  second.tick(t0, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_NE(as<stage::Heartbeat>(out.pushes[0].second).incarnation, incarnation);
}

TEST_F(BatcherHubTest, AnItemThatArrivesTwiceIsTakenOnce) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_sequences(sequences({item(1), item(2)}), t0, out);
  h.on_sequences(sequences({item(2), item(3)}), t0, out);  // 2 submitted again
  EXPECT_EQ(h.queued(), 3u);
  EXPECT_TRUE(out.pushes.empty()) << "a duplicate is dropped without an answer";
  // Remembered until its deadline (60 s), then forgotten: the same key is taken again.
  const Now later = t0 + std::chrono::seconds(61);
  h.tick(later, out);
  stage::SequenceItem again = item(2);
  again.deadline = Deadline::after(later, std::chrono::seconds(60));
  h.on_sequences(sequences({again}), later, out);
  EXPECT_EQ(h.queued(), 4u);
}

TEST_F(BatcherHubTest, ASequenceWithoutIdsIsAnInternalError) {
  BatcherHub& h = hub();
  Outbox out;
  stage::SequenceItem empty = item(1);
  empty.ids.clear();
  h.on_sequences(sequences({empty, item(2)}), t0, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items.at(0).request, 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items[0].error->code,
            protocol::ErrorCode::kInternal);
  EXPECT_EQ(h.queued(), 1u);
}

TEST_F(BatcherHubTest, UnexpectedKindsReleaseNoCredit) {
  BatcherHub& h = hub();
  Outbox out;
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.on_worker(Role::kDecoder, "d", stage::Ready{1}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Encoded{1, {encoded(1)}}, t0);
  h.on_sequences(sequences({item(2), item(3)}), t0, out);
  h.dispatch(t0, out);
  ASSERT_EQ(h.credits(Role::kEncoder).free_credits("e"), 0);
  ASSERT_EQ(h.credits(Role::kDecoder).free_credits("d"), 0);
  out.clear();
  h.on_worker(Role::kDecoder, "d", stage::Encoded{1, {encoded(9)}}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Decoded{1, {decoded(encoded(9))}}, t0);
  h.on_worker(Role::kDecoder, "d", stage::Decode{{encoded(9)}}, t0);
  h.on_sequences(stage::Encode{{item(9)}}, t0, out);
  EXPECT_EQ(h.credits(Role::kEncoder).free_credits("e"), 0);
  EXPECT_EQ(h.credits(Role::kDecoder).free_credits("d"), 0);
  EXPECT_EQ(h.queued(), 0u);
  h.dispatch(t0, out);
  EXPECT_TRUE(out.sends.empty());
  EXPECT_TRUE(out.pushes.empty());
}

}  // namespace
}  // namespace seqpipe::batcher
