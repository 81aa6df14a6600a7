// The worker-pool mechanism both hubs share (seqpipe/runtime/hub.h), on made-up moments: credits
// gate the work, the record of what each worker holds follows its answers (in order, or item by
// item), heartbeats and silence, and the retry-once rule for what a dead worker held.
#include "seqpipe/runtime/hub.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

namespace seqpipe::hub {
namespace {

using std::chrono::milliseconds;

const Now t0{SteadyClock::time_point{} + std::chrono::hours(1), 1'700'000'000'000'000};

stage::SequenceItem item(uint64_t request, uint32_t index = 0) {
  stage::SequenceItem w;
  w.request = request;
  w.index = index;
  w.gateway = "ipc:///tmp/gw.sock";
  w.deadline = Deadline::after(t0, std::chrono::seconds(60));
  return w;
}

std::vector<uint64_t> requests(const std::vector<stage::SequenceItem>& items) {
  std::vector<uint64_t> out;
  for (const auto& i : items) out.push_back(i.request);
  return out;
}

class WorkerPoolTest : public ::testing::Test {
 protected:
  WorkerPoolTest() : registry_(metrics::make_registry()), metrics_(*registry_, "batcher") {
    liveness_.heartbeat_interval_ms = 100;
    liveness_.heartbeat_liveness = 3;
  }
  WorkerPool<stage::Encode> pool(Answers answers) {
    return WorkerPool<stage::Encode>({"batcher", "encoder", 2, answers}, liveness_, metrics_);
  }
  static bool none(const stage::WorkHeader&) { return false; }

  config::LivenessConfig liveness_;
  std::shared_ptr<prometheus::Registry> registry_;
  metrics::StageMetrics metrics_;
};

TEST_F(WorkerPoolTest, WorkGoesOnlyWithinTheCreditAnnounced) {
  auto p = pool(Answers::kInOrder);
  EXPECT_FALSE(p.take().has_value());
  p.ready("w1", 2, t0.steady);
  EXPECT_EQ(p.take(2), "w1");
  EXPECT_FALSE(p.take().has_value());
  p.release("w1", 1);
  EXPECT_EQ(p.take(), "w1");
  EXPECT_EQ(p.status(5), (status::StageStatus{"encoder", 1, 2, 5, 0}));
}

TEST_F(WorkerPoolTest, OnlyMembersAreHeard) {
  auto p = pool(Answers::kInOrder);
  EXPECT_FALSE(p.heard("stranger", t0.steady));
  p.ready("w1", 1, t0.steady);
  EXPECT_TRUE(p.heard("w1", t0.steady));
  Outbox out;
  p.remove("w1", t0, none);
  EXPECT_FALSE(p.heard("w1", t0.steady));  // declared dead: what it says goes no further
}

TEST_F(WorkerPoolTest, AReplicaThatSaysItIsStoppingGetsNoWorkAndIsNotLost) {
  auto p = pool(Answers::kInOrder);
  p.ready("w1", 2, t0.steady);
  p.ready("w2", 2, t0.steady);
  p.ready("w1", 0, t0.steady);  // an unload or a shutdown: 0 credits
  EXPECT_EQ(p.take(), "w2");
  EXPECT_EQ(p.take(), "w2");
  EXPECT_FALSE(p.take().has_value());
  p.remove("w1", t0, none);  // then it is gone
  EXPECT_EQ(p.status(0).lost, 0);
  EXPECT_EQ(p.size(), 1u);
  p.remove("w2", t0, none);  // w2 died without a word
  EXPECT_EQ(p.status(0).lost, 1);
}

TEST_F(WorkerPoolTest, ALostItemGoesOutOnceMoreThenIsUnavailable) {
  auto p = pool(Answers::kInOrder);
  p.ready("w1", 4, t0.steady);
  p.ready("w2", 4, t0.steady);
  p.ready("w3", 4, t0.steady);
  p.sent("w1", stage::Encode{{item(1), item(2)}});
  p.sent("w1", stage::Encode{{item(3)}});
  p.answered("w1");  // the batch of 1 and 2 is answered: only 3 is held
  auto lost = p.remove("w1", t0, none);
  EXPECT_EQ(requests(lost.again), (std::vector<uint64_t>{3}));
  EXPECT_TRUE(lost.failed.empty());
  // Sent again with a new one, and lost again: 3 fails, 4 goes out once more.
  p.sent("w2", stage::Encode{{lost.again[0], item(4)}});
  lost = p.remove("w2", t0, none);
  EXPECT_EQ(requests(lost.again), (std::vector<uint64_t>{4}));
  ASSERT_EQ(lost.failed.size(), 1u);
  EXPECT_EQ(lost.failed[0].first.request, 3u);
  EXPECT_EQ(lost.failed[0].second, "two encoder replicas failed on this item");
  // The last replica dies: nobody is left to take item 5.
  p.sent("w3", stage::Encode{{item(5)}});
  lost = p.remove("w3", t0, none);
  EXPECT_TRUE(lost.again.empty());
  ASSERT_EQ(lost.failed.size(), 1u);
  EXPECT_EQ(lost.failed[0].second, "the encoder holding this item died and no other is live");
  // Removing a worker twice, or one never seen, changes nothing.
  EXPECT_TRUE(p.remove("w3", t0, none).failed.empty());
}

// A member announcing 0 credits drains: no more work, its held work answered as usual, and once
// gone (silent) it leaves without a re-dispatch, a death or a lost replica counted.
TEST_F(WorkerPoolTest, ADrainingWorkerGetsNoWorkAndLeavesWithoutARedispatch) {
  auto p = pool(Answers::kByItem);
  p.ready("w1", 4, t0.steady);
  p.ready("w2", 4, t0.steady);
  ASSERT_EQ(p.take(2), "w1");
  p.sent("w1", stage::Encode{{item(1), item(2)}});
  p.ready("w1", 0, t0.steady);  // SIGTERM: credit withdrawn
  EXPECT_EQ(p.take(1), "w2");
  EXPECT_EQ(p.take(4), std::nullopt);  // w1 has none to give, w2 has 3 left
  EXPECT_TRUE(p.answered("w1", item(1)));
  EXPECT_TRUE(p.answered("w1", item(2)));
  p.release("w1", 2);
  EXPECT_EQ(p.credits().free_credits("w1"), 0);
  EXPECT_TRUE(p.remove("w1", t0, none).again.empty());
  EXPECT_EQ(p.status(0).lost, 0);
  const std::string text = [&] {
    std::string out;
    for (const auto& family : registry_->Collect())
      for (const auto& metric : family.metric)
        out += family.name + " " + std::to_string(metric.counter.value) + "\n";
    return out;
  }();
  EXPECT_NE(text.find("seqpipe_hub_workers_drained_total 1"), std::string::npos) << text;
  EXPECT_NE(text.find("seqpipe_hub_workers_declared_dead_total 0"), std::string::npos) << text;
  EXPECT_NE(text.find("seqpipe_hub_items_redispatched_total 0"), std::string::npos) << text;
}

// A drain cut short (it still held work when it went silent) is a death like any other.
TEST_F(WorkerPoolTest, ADrainingWorkerThatDiesHoldingWorkIsRedispatched) {
  auto p = pool(Answers::kByItem);
  p.ready("w1", 4, t0.steady);
  p.ready("w2", 4, t0.steady);
  p.sent("w1", stage::Encode{{item(1)}});
  p.ready("w1", 0, t0.steady);
  EXPECT_EQ(requests(p.remove("w1", t0, none).again), (std::vector<uint64_t>{1}));
  EXPECT_EQ(p.status(0).lost, 1);
}

TEST_F(WorkerPoolTest, ItemsThatNoLongerMatterAreNotSentAgain) {
  auto p = pool(Answers::kInOrder);
  p.ready("w1", 4, t0.steady);
  p.ready("w2", 4, t0.steady);
  stage::SequenceItem expired = item(2);
  expired.deadline = Deadline::after(t0, milliseconds(10));
  p.sent("w1", stage::Encode{{item(1), expired, item(3)}});
  auto lost = p.remove("w1", t0 + milliseconds(10),
                       [](const stage::WorkHeader& i) { return i.request == 3; });  // cancelled
  EXPECT_EQ(requests(lost.again), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(lost.failed.empty());
}

TEST_F(WorkerPoolTest, ItemByItemAnswersFindTheirItemOnce) {
  auto p = pool(Answers::kByItem);
  p.ready("w1", 4, t0.steady);
  p.sent("w1", stage::Encode{{item(1, 0), item(1, 1)}});
  EXPECT_TRUE(p.answered("w1", item(1, 1)));
  EXPECT_FALSE(p.answered("w1", item(1, 1)));  // a duplicate
  EXPECT_FALSE(p.answered("w2", item(1, 0)));  // not held there
  auto lost = p.remove("w1", t0, none);        // only (1, 0) was still held
  ASSERT_EQ(lost.failed.size(), 1u);           // and nobody is left
  EXPECT_EQ(lost.failed[0].first.index, 0u);
}

TEST_F(WorkerPoolTest, HeldItemsCanBeDroppedWorkerByWorker) {
  auto p = pool(Answers::kByItem);
  p.ready("w1", 4, t0.steady);
  p.ready("w2", 4, t0.steady);
  p.sent("w1", stage::Encode{{item(1), item(2)}});
  p.sent("w2", stage::Encode{{item(2, 1)}});
  std::vector<std::pair<std::string, size_t>> dropped;
  p.drop_held([](const stage::SequenceItem& i) { return i.request == 2; },
              [&](const std::string& w, size_t n) { dropped.emplace_back(w, n); });
  std::sort(dropped.begin(), dropped.end());
  EXPECT_EQ(dropped, (std::vector<std::pair<std::string, size_t>>{{"w1", 1}, {"w2", 1}}));
  EXPECT_FALSE(p.answered("w1", item(2)));
  EXPECT_TRUE(p.answered("w1", item(1)));
}

TEST_F(WorkerPoolTest, HeartbeatsGoOncePerIntervalAndSilentWorkersAreDead) {
  auto p = pool(Answers::kByItem);
  p.ready("w1", 1, t0.steady);
  p.ready("w2", 1, t0.steady);
  Outbox out;
  bool beat = false;
  EXPECT_TRUE(p.tick(t0, out, &beat).empty());
  EXPECT_TRUE(beat);
  ASSERT_EQ(out.sends.size(), 2u);
  EXPECT_EQ(out.sends[0].link, 2u);
  EXPECT_EQ(out.sends[0].message, stage::StageMessage(stage::Heartbeat{}));
  p.tick(t0 + milliseconds(50), out, &beat);
  EXPECT_FALSE(beat);
  EXPECT_EQ(out.sends.size(), 2u);
  p.heard("w2", (t0 + milliseconds(250)).steady);
  EXPECT_EQ(p.tick(t0 + milliseconds(301), out), std::vector<std::string>{"w1"});
}

TEST_F(WorkerPoolTest, AtEachHeartbeatExpiredItemsAndRetryMarksAreForgotten) {
  auto p = pool(Answers::kByItem);
  p.ready("w1", 4, t0.steady);
  p.ready("w2", 4, t0.steady);
  stage::SequenceItem soon = item(1);
  soon.deadline = Deadline::after(t0, milliseconds(150));
  p.sent("w1", stage::Encode{{soon}});
  auto lost = p.remove("w1", t0, none);  // sent again once: marked
  ASSERT_EQ(lost.again.size(), 1u);
  p.sent("w2", stage::Encode{{lost.again[0]}});
  Outbox out;
  p.tick(t0, out);
  p.tick(t0 + milliseconds(200), out);  // a heartbeat after its deadline: forgotten everywhere
  EXPECT_FALSE(p.answered("w2", soon));
}

// Workers of several model versions on one socket: each joins its version's pool, work taken
// from a version's pool goes to its workers only, and a dead worker leaves its own pool.
TEST_F(WorkerPoolTest, ModelPoolsKeepEachVersionsWorkersApart) {
  ModelPools<stage::Encode> pools({"batcher", "encoder", 2, Answers::kInOrder}, liveness_,
                                  metrics_);
  pools.ready("wa", "a/1", 2, t0.steady);
  pools.ready("wb", "b/1", 1, t0.steady);
  EXPECT_EQ(pools.model_of("wa"), "a/1");
  EXPECT_EQ(pools.of("wb"), pools.find("b/1"));
  EXPECT_EQ(pools.of("nobody"), nullptr);
  EXPECT_EQ(pools.find("a/1")->take(2), "wa");
  EXPECT_FALSE(pools.find("a/1")->take(1).has_value());  // b/1's credit is not a/1's
  EXPECT_EQ(pools.find("b/1")->take(1), "wb");
  EXPECT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools.status([](const std::string&) { return 0; }).size(), 2u);
  // wb falls silent: the tick names it, and it leaves b/1's pool only.
  Outbox out;
  pools.tick(t0, out);
  pools.find("a/1")->heard("wa", t0.steady + milliseconds(350));
  const auto dead = pools.tick(t0 + milliseconds(400), out);
  ASSERT_EQ(dead, (std::vector<std::string>{"wb"}));
  pools.of("wb")->remove("wb", t0 + milliseconds(400), none);
  pools.forget("wb");
  EXPECT_EQ(pools.size(), 1u);
  EXPECT_EQ(pools.of("wb"), nullptr);
}

}  // namespace
}  // namespace seqpipe::hub
