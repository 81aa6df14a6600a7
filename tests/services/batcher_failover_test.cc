// The gateway's batchers (services/gateway/batcher_failover.h), on made-up moments: heartbeats,
// round-robin over the live ones, and the requests of a batcher that dies or restarts submitted
// again once, else lost.
#include "gateway/batcher_failover.h"

#include <gtest/gtest.h>

#include "seqpipe/config/config.h"

namespace seqpipe::gateway {
namespace {

using std::chrono::milliseconds;
const SteadyClock::time_point t0 = SteadyClock::time_point{} + std::chrono::hours(1);

config::PipelineConfig with_batchers(std::vector<std::string> endpoints) {
  config::PipelineConfig c;
  c.batcher.ingress_endpoint = "ipc:///tmp/in.sock";
  c.gateway.batcher_endpoints = std::move(endpoints);
  c.liveness.heartbeat_interval_ms = 100;
  c.liveness.heartbeat_liveness = 3;
  return c;
}

TEST(BatcherFailover, ALoneBatchersRequestsGoToItAgainWhenItRestarts) {
  BatcherFailover f(with_batchers({}), "ipc:///tmp/results.sock");
  EXPECT_FALSE(f.several());
  EXPECT_EQ(f.endpoints(), std::vector<std::string>{"ipc:///tmp/in.sock"});
  Outbox out;
  f.tick(t0, out);
  ASSERT_EQ(out.pushes.size(), 1u);  // heartbeats run with one batcher too
  EXPECT_EQ(out.pushes[0].first, "ipc:///tmp/in.sock");
  ASSERT_TRUE(f.assign(1));
  ASSERT_TRUE(f.assign(2));
  EXPECT_EQ(f.target(1), "");  // the tokenizers send to the configured ingress
  auto failover = f.heard("ipc:///tmp/in.sock", 7, t0 + milliseconds(10));
  EXPECT_TRUE(failover.moved.empty()) << "the first incarnation heard";
  failover = f.heard("ipc:///tmp/in.sock", 7, t0 + milliseconds(110));
  EXPECT_TRUE(failover.moved.empty()) << "the same incarnation";
  f.forget(2);  // answered
  ASSERT_TRUE(f.assign(3));
  failover = f.heard("ipc:///tmp/in.sock", 8, t0 + milliseconds(210));  // restarted
  EXPECT_EQ(failover.dead, 0u);
  EXPECT_EQ(failover.moved, (std::vector<uint64_t>{1, 3}));
  EXPECT_TRUE(failover.lost.empty());
  failover = f.heard("ipc:///tmp/in.sock", 9, t0 + milliseconds(310));  // and again
  EXPECT_TRUE(failover.moved.empty());
  ASSERT_EQ(failover.lost.size(), 2u);
  EXPECT_EQ(failover.lost[0].second, "the batcher holding this request restarted twice");
}

TEST(BatcherFailover, ALoneDeadBatchersRequestsWaitForItsReturn) {
  BatcherFailover f(with_batchers({}), "ipc:///tmp/results.sock");
  Outbox out;
  f.tick(t0, out);
  f.heard("ipc:///tmp/in.sock", 7, t0);
  ASSERT_TRUE(f.assign(1));
  auto failover = f.tick(t0 + milliseconds(301), out);  // silent for 3 intervals
  EXPECT_EQ(failover.dead, 1u);
  EXPECT_TRUE(failover.moved.empty());
  EXPECT_TRUE(failover.lost.empty()) << "kept until it is back, or the request's deadline";
  EXPECT_EQ(f.live(), 0u);
  EXPECT_TRUE(f.assign(2)) << "one batcher takes new requests even while it is down";
  failover = f.heard("ipc:///tmp/in.sock", 8, t0 + milliseconds(900));  // back, restarted
  EXPECT_EQ(failover.moved, (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(failover.lost.empty());
  EXPECT_EQ(f.live(), 1u);
}

TEST(BatcherFailover, ASilentBatchersRequestsMoveOnceThenAreLost) {
  BatcherFailover f(with_batchers({"b1", "b2"}), "ipc:///tmp/results.sock");
  Outbox out;
  f.tick(t0, out);
  ASSERT_EQ(out.pushes.size(), 2u);  // a heartbeat to each, naming where to answer
  EXPECT_EQ(out.pushes[0].second, stage::StageMessage(stage::Heartbeat{"ipc:///tmp/results.sock"}));
  ASSERT_TRUE(f.assign(1));
  ASSERT_TRUE(f.assign(2));
  EXPECT_EQ(f.target(1), "b2");  // round-robin
  EXPECT_EQ(f.target(2), "b1");
  f.heard("b1", 11, t0 + milliseconds(250));
  auto failover = f.tick(t0 + milliseconds(301), out);  // b2 silent for 3 intervals
  EXPECT_EQ(failover.dead, 1u);
  EXPECT_EQ(failover.moved, std::vector<uint64_t>{1});
  EXPECT_TRUE(failover.lost.empty());
  EXPECT_EQ(f.target(1), "b1");
  EXPECT_EQ(f.live(), 1u);
  f.forget(2);                                     // answered
  failover = f.tick(t0 + milliseconds(600), out);  // b1 silent too
  ASSERT_EQ(failover.lost.size(), 1u);
  EXPECT_EQ(failover.lost[0].first, 1u);
  EXPECT_EQ(failover.lost[0].second, "two batchers failed on this request");
  EXPECT_FALSE(f.assign(3));                  // none live
  f.heard("b2", 22, t0 + milliseconds(700));  // restarted
  EXPECT_TRUE(f.assign(3));
  EXPECT_EQ(f.target(3), "b2");
}

}  // namespace
}  // namespace seqpipe::gateway
