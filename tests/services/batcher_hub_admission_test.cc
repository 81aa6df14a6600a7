// What the batcher hub lets in and in which order, on an injected clock, no sockets
// (batcher_hub_fixture.h): priorities, a backlog behind slow decoders, admission and dispatch on
// the measured service time.
#include <gtest/gtest.h>

#include "batcher_hub_fixture.h"

namespace seqpipe::batcher {
namespace {

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
