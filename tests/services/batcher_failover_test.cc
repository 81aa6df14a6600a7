// The gateway's failover between several batchers (services/gateway/batcher_failover.h), on
// made-up moments: round-robin over the live ones, heartbeats, and the requests of a silent
// batcher moved once, else lost.
#include "gateway/batcher_failover.h"

#include <gtest/gtest.h>

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

TEST(BatcherFailover, WithOneBatcherNothingRuns) {
  BatcherFailover f(with_batchers({}), "ipc:///tmp/results.sock");
  EXPECT_FALSE(f.several());
  EXPECT_TRUE(f.assign(1));
  EXPECT_EQ(f.target(1), "");  // the tokenizers send to the configured ingress
  EXPECT_EQ(f.endpoints(), std::vector<std::string>{"ipc:///tmp/in.sock"});
  Outbox out;
  const auto failover = f.tick(t0 + std::chrono::hours(1), out);
  EXPECT_TRUE(out.pushes.empty());
  EXPECT_EQ(failover.dead, 0u);
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
  f.heard("b1", t0 + milliseconds(250));
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
  EXPECT_FALSE(f.assign(3));              // none live
  f.heard("b2", t0 + milliseconds(700));  // restarted
  EXPECT_TRUE(f.assign(3));
  EXPECT_EQ(f.target(3), "b2");
}

}  // namespace
}  // namespace seqpipe::gateway
