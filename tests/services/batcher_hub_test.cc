// The batcher hub on an injected clock, no sockets: batches only to encoders with credit,
// decoders charged num_beams slots, credits returned re-enable dispatch, overload and dead
// workers' work.
#include "batcher/batcher_hub.h"

#include <gtest/gtest.h>

namespace seqpipe::batcher {
namespace {

using std::chrono::milliseconds;
// The test's moment zero, on both clocks: the hub reads no clock of its own.
const Now t0{Clock::time_point{} + std::chrono::hours(1), 1'700'000'000'000'000};

stage::SequenceItem item(uint64_t request, int tokens = 5, int beams = 1) {
  stage::SequenceItem w;
  w.request = request;
  w.gateway = "ipc:///tmp/gw.sock";
  w.deadline = Deadline::after(t0, std::chrono::seconds(60));
  w.params.num_beams = beams;
  w.ids.assign(static_cast<size_t>(tokens), 7);
  return w;
}
// The same sequence as an encoder returns it.
stage::EncodedItem encoded(uint64_t request, int tokens = 5, int beams = 1) {
  return stage::next_hop<stage::EncodedItem>(item(request, tokens, beams));
}
// What an encoder answers for the batch `encode` (an encode message).
stage::Encoded encoded_batch(const stage::StageMessage& encode, int credits) {
  stage::Encoded answer{credits, {}};
  for (auto i : std::get<stage::Encode>(encode).items)
    answer.items.push_back(stage::next_hop<stage::EncodedItem>(std::move(i)));
  return answer;
}
// What a decoder answers for `item`.
stage::DecodedItem decoded(stage::EncodedItem item) {
  return stage::next_hop<stage::DecodedItem>(std::move(item));
}

stage::StageMessage sequences(std::vector<stage::SequenceItem> items) {
  return stage::Sequence{std::move(items)};
}

std::vector<uint64_t> requests(const stage::StageMessage& m) {
  std::vector<uint64_t> out;
  std::visit(
      [&](const auto& message) {
        if constexpr (requires { message.items; }) {
          for (const auto& i : message.items) out.push_back(i.request);
        } else if constexpr (requires { message.requests; }) {
          for (const auto& r : message.requests) out.push_back(r.request);
        }
      },
      m);
  return out;
}
template <class M>
const M& as(const stage::StageMessage& m) {
  return std::get<M>(m);
}

class BatcherHubTest : public ::testing::Test {
 protected:
  BatcherHubTest() : registry_(metrics::make_registry()), metrics_(*registry_, "batcher") {
    config_.batcher.max_batch_size = 2;
    config_.batcher.preferred_batch_sizes = {2};
    config_.batcher.max_queue_delay_us = 1000;
    config_.liveness.heartbeat_interval_ms = 100;
    config_.liveness.heartbeat_liveness = 3;
  }
  BatcherHub& hub() {
    hub_ = std::make_unique<BatcherHub>(config_, metrics_);
    return *hub_;
  }
  // The messages of one role in the outbox (heartbeats left out).
  static std::vector<Outbox::Send> sent(const Outbox& out, Role role) {
    std::vector<Outbox::Send> v;
    for (const auto& m : out.sends) {
      if (m.link == link(role) && !std::holds_alternative<stage::Heartbeat>(m.message))
        v.push_back(m);
    }
    return v;
  }

  config::PipelineConfig config_;
  std::shared_ptr<prometheus::Registry> registry_;
  metrics::StageMetrics metrics_;
  std::unique_ptr<BatcherHub> hub_;
};

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

TEST_F(BatcherHubTest, HighPriorityRequestsOvertakeQueuedLowPriorityOnes) {
  config_.batcher.priority_levels = 2;
  config_.batcher.default_priority_level = 2;
  BatcherHub& h = hub();
  Outbox out;
  // No encoder yet: four default-priority (level 2) sequences queue, then two urgent ones.
  h.on_sequences(sequences({item(1), item(2), item(3), item(4)}), t0, out);
  stage::SequenceItem urgent1 = item(11), urgent2 = item(12);
  urgent1.params.priority = urgent2.params.priority = 1;
  h.on_sequences(sequences({urgent1, urgent2}), t0 + milliseconds(1), out);
  EXPECT_TRUE(out.pushes.empty());
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.dispatch(t0 + milliseconds(1), out);
  auto batches = sent(out, Role::kEncoder);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(requests(batches[0].message), (std::vector<uint64_t>{11, 12}));
  // The next credit takes the oldest low-priority ones.
  h.on_worker(Role::kEncoder, "e", encoded_batch(batches[0].message, 1), t0);
  out.clear();
  h.dispatch(t0 + milliseconds(1), out);
  batches = sent(out, Role::kEncoder);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(requests(batches[0].message), (std::vector<uint64_t>{1, 2}));
}

TEST_F(BatcherHubTest, HighPrioritySequencesAlsoGoFirstToDecoderSlots) {
  config_.batcher.priority_levels = 3;
  config_.batcher.default_priority_level = 2;
  BatcherHub& h = hub();
  Outbox out;
  h.on_worker(Role::kEncoder, "e", stage::Ready{2}, t0);
  // Encoded sequences wait for decoder slots (no decoder yet): default level, then low, then
  // urgent ones, then default again.
  stage::EncodedItem low = encoded(3), urgent1 = encoded(4), urgent2 = encoded(5);
  low.params.priority = 3;
  urgent1.params.priority = urgent2.params.priority = 1;
  h.on_worker(Role::kEncoder, "e", stage::Encoded{0, {encoded(1), encoded(2)}}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Encoded{0, {low, urgent1}}, t0);
  h.on_worker(Role::kEncoder, "e", stage::Encoded{0, {urgent2, encoded(6)}}, t0);
  h.on_worker(Role::kDecoder, "d", stage::Ready{6}, t0);
  h.dispatch(t0, out);
  auto decodes = sent(out, Role::kDecoder);
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(requests(decodes[0].message), (std::vector<uint64_t>{4, 5, 1, 2, 6, 3}));
}

TEST_F(BatcherHubTest, APriorityBeyondTheLevelsIsAnInvalidArgumentResult) {
  config_.batcher.priority_levels = 2;
  BatcherHub& h = hub();
  Outbox out;
  stage::SequenceItem w = item(5);
  w.params.priority = 3;  // a gateway configured with more levels than this batcher
  h.on_sequences(sequences({w, item(6)}), t0, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  const auto& failed = as<stage::Result>(out.pushes[0].second).items.at(0);
  EXPECT_EQ(failed.request, 5u);
  ASSERT_TRUE(failed.error.has_value());
  EXPECT_EQ(failed.error->code, protocol::ErrorCode::kInvalidArgument);
  EXPECT_EQ(failed.error->message,
            "params.priority 3 is not a priority level of the batcher (1..2)");
  EXPECT_EQ(h.queued(), 1u);
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
  BatcherHub second(config_, metrics_);
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

TEST_F(BatcherHubTest, NoNewBatchesWhileDecodersAreBehindAndTheWholeBacklogCountsForOverload) {
  config_.batcher.max_queue_size = 6;  // max_batch_size 2: batching pauses at 4 encoded waiting
  BatcherHub& h = hub();
  Outbox out;
  h.on_worker(Role::kEncoder, "e", stage::Ready{8}, t0);
  h.on_worker(Role::kEncoder, "e",
              stage::Encoded{0, {encoded(1), encoded(2), encoded(3), encoded(4)}}, t0);
  h.on_sequences(sequences({item(5), item(6)}), t0, out);
  h.dispatch(t0, out);
  EXPECT_TRUE(sent(out, Role::kEncoder).empty());  // 4 encoded sequences wait for decoder slots
  h.on_sequences(sequences({item(7)}), t0, out);   // 4 waiting + 2 queued = max_queue_size
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items.at(0).request, 7u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items.at(0).error->code,
            protocol::ErrorCode::kOverloaded);
  h.on_worker(Role::kDecoder, "d", stage::Ready{8}, t0);
  out.clear();
  h.dispatch(t0, out);  // the decoders take the backlog, and batching resumes
  EXPECT_EQ(sent(out, Role::kDecoder).size(), 1u);
  ASSERT_EQ(sent(out, Role::kEncoder).size(), 1u);
  EXPECT_EQ(requests(sent(out, Role::kEncoder)[0].message), (std::vector<uint64_t>{5, 6}));
}

// The failed results pushed to the gateway in `out`: (request, code, message).
std::vector<std::tuple<uint64_t, protocol::ErrorCode, std::string>> failures(const Outbox& out) {
  std::vector<std::tuple<uint64_t, protocol::ErrorCode, std::string>> v;
  for (const auto& [to, m] : out.pushes) {
    if (const auto* r = std::get_if<stage::Result>(&m))
      for (const auto& i : r->items)
        if (i.error) v.emplace_back(i.request, i.error->code, i.error->message);
  }
  return v;
}

stage::SequenceItem item_due(uint64_t request, const Now& now, milliseconds left) {
  stage::SequenceItem w = item(request);
  w.deadline = Deadline::after(now, left);
  return w;
}

TEST_F(BatcherHubTest, AdmissionAndDispatchFollowTheMeasuredServiceTime) {
  config_.batcher.max_batch_size = 1;
  config_.batcher.preferred_batch_sizes = {1};
  BatcherHub& h = hub();
  Outbox out;
  const auto at = [](int ms) { return t0 + milliseconds(ms); };
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.on_worker(Role::kDecoder, "d", stage::Ready{8}, t0);
  h.on_worker(Role::kPostprocessor, "p", stage::Ready{64}, t0);
  // Four sequences, one batch at a time: the encoder gives its credit back every 100 ms, and
  // each sequence takes 100 ms from its dispatch to its decoded answer; one comes back every
  // 100 ms while others wait (the pace: 100 ms a sequence).
  h.on_sequences(sequences({item(1), item(2), item(3), item(4)}), t0, out);
  for (int k = 0; k < 4; ++k) {
    if (k > 0) h.on_worker(Role::kEncoder, "e", stage::Credit{1}, at(100 * k));
    out.clear();
    h.dispatch(at(100 * k), out);
    auto batch = sent(out, Role::kEncoder);
    ASSERT_EQ(batch.size(), 1u) << k;
    h.on_worker(Role::kEncoder, "e", encoded_batch(batch[0].message, 0), at(100 * k));
    out.clear();
    h.dispatch(at(100 * k), out);
    auto decode = sent(out, Role::kDecoder);
    ASSERT_EQ(decode.size(), 1u) << k;
    if (k == 3) break;  // the last one stays on the decoder: the lane is serving
    h.on_worker(Role::kDecoder, "d",
                stage::Decoded{1, {decoded(as<stage::Decode>(decode[0].message).items[0])}},
                at(100 * k + 100));
  }
  ASSERT_TRUE(h.queued() == 0u);
  // Measured: 100 ms to serve one, 100 ms a sequence. At 300 ms: 5 is answered 100 ms on, 6
  // behind it 200 ms on; 6's deadline (150 ms) is refused at once, naming where deadlines come
  // from; 7, with time enough, is queued.
  out.clear();
  h.on_sequences(
      sequences({item_due(5, at(300), milliseconds(150)), item_due(6, at(300), milliseconds(150)),
                 item_due(7, at(300), milliseconds(5000))}),
      at(300), out);
  auto refused = failures(out);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(std::get<0>(refused[0]), 6u);
  EXPECT_EQ(std::get<1>(refused[0]), protocol::ErrorCode::kOverloaded);
  EXPECT_NE(std::get<2>(refused[0]).find("gateway.default_timeout_ms"), std::string::npos);
  EXPECT_EQ(h.queued(), 2u);
  // 5 goes to the encoder with its credit; 8, due at 1380 ms, is admitted at 380 ms (7 ahead:
  // 100 + 100 ms of work).
  h.on_worker(Role::kEncoder, "e", stage::Credit{1}, at(300));
  out.clear();
  h.dispatch(at(300), out);
  ASSERT_EQ(sent(out, Role::kEncoder).size(), 1u);
  const stage::StageMessage batch5 = sent(out, Role::kEncoder)[0].message;
  EXPECT_EQ(requests(batch5), (std::vector<uint64_t>{5}));
  out.clear();
  h.on_sequences(sequences({item_due(8, at(380), milliseconds(1000))}), at(380), out);
  ASSERT_TRUE(failures(out).empty());
  // The encoder comes back late, at 1300 ms: 7 goes, and 8 (80 ms left, 100 ms to serve) is
  // dropped before any compute, its gateway answered deadline_exceeded now, not at its deadline.
  h.on_worker(Role::kEncoder, "e", encoded_batch(batch5, 1), at(1300));
  out.clear();
  h.dispatch(at(1300), out);
  ASSERT_EQ(sent(out, Role::kEncoder).size(), 1u);
  EXPECT_EQ(requests(sent(out, Role::kEncoder)[0].message), (std::vector<uint64_t>{7}));
  auto dropped = failures(out);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(std::get<0>(dropped[0]), 8u);
  EXPECT_EQ(std::get<1>(dropped[0]), protocol::ErrorCode::kDeadlineExceeded);
  EXPECT_NE(std::get<2>(dropped[0]).find("before computing"), std::string::npos);
  EXPECT_EQ(h.queued(), 0u);
}

TEST_F(BatcherHubTest, AnIdleLaneRefusesNothingOnAnEstimate) {
  config_.batcher.max_batch_size = 1;
  config_.batcher.preferred_batch_sizes = {1};
  BatcherHub& h = hub();
  Outbox out;
  const auto at = [](int ms) { return t0 + milliseconds(ms); };
  h.on_worker(Role::kEncoder, "e", stage::Ready{1}, t0);
  h.on_worker(Role::kDecoder, "d", stage::Ready{8}, t0);
  h.on_worker(Role::kPostprocessor, "p", stage::Ready{64}, t0);
  // One sequence measured at 500 ms (a busy moment long gone).
  h.on_sequences(sequences({item(1)}), t0, out);
  h.dispatch(t0, out);
  h.on_worker(Role::kEncoder, "e", encoded_batch(sent(out, Role::kEncoder)[0].message, 1), t0);
  out.clear();
  h.dispatch(t0, out);
  h.on_worker(Role::kDecoder, "d",
              stage::Decoded{
                  1, {decoded(as<stage::Decode>(sent(out, Role::kDecoder)[0].message).items[0])}},
              at(500));
  // Nothing in service now: a request due in 50 ms is neither refused nor dropped on the stale
  // estimate; serving it measures again.
  out.clear();
  h.on_sequences(sequences({item_due(2, at(600), milliseconds(50))}), at(600), out);
  h.dispatch(at(600), out);
  EXPECT_TRUE(failures(out).empty());
  ASSERT_EQ(sent(out, Role::kEncoder).size(), 1u);
  EXPECT_EQ(requests(sent(out, Role::kEncoder)[0].message), (std::vector<uint64_t>{2}));
}

}  // namespace
}  // namespace seqpipe::batcher
