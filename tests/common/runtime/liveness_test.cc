// Heartbeat bookkeeping on an injected clock: when a peer counts as dead, when heartbeats are
// due, and how reconnection pauses grow and reset.
#include "seqpipe/runtime/liveness.h"

#include <gtest/gtest.h>

namespace seqpipe::common {
namespace {

using std::chrono::milliseconds;
const SteadyClock::time_point t0{};

TEST(HubLiveness, AWorkerSilentForLivenessIntervalsIsDeadOnce) {
  HubLiveness hub(milliseconds(100), 3);
  hub.seen("a", t0);
  hub.seen("b", t0);
  hub.seen("b", t0 + milliseconds(250));                       // b keeps talking
  EXPECT_TRUE(hub.take_dead(t0 + milliseconds(300)).empty());  // exactly 3 intervals: not yet
  EXPECT_EQ(hub.take_dead(t0 + milliseconds(301)), std::vector<std::string>{"a"});
  EXPECT_TRUE(hub.take_dead(t0 + milliseconds(302)).empty());  // reported once, then forgotten
  EXPECT_EQ(hub.workers(), std::vector<std::string>{"b"});
  EXPECT_EQ(hub.take_dead(t0 + milliseconds(551)), std::vector<std::string>{"b"});
}

TEST(HubLiveness, SilentCountsWorkersQuietForMoreThanOneInterval) {
  HubLiveness hub(milliseconds(100), 3);
  hub.seen("a", t0);
  hub.seen("b", t0);
  EXPECT_EQ(hub.silent(t0 + milliseconds(100)), 0);  // exactly one interval: not missed yet
  EXPECT_EQ(hub.silent(t0 + milliseconds(101)), 2);
  hub.seen("b", t0 + milliseconds(150));
  EXPECT_EQ(hub.silent(t0 + milliseconds(201)), 1);  // only a
}

TEST(HubLiveness, ForgottenWorkersAreNeitherDeadNorSentHeartbeats) {
  HubLiveness hub(milliseconds(100), 2);
  hub.seen("a", t0);
  hub.forget("a");
  EXPECT_TRUE(hub.workers().empty());
  EXPECT_TRUE(hub.take_dead(t0 + milliseconds(1000)).empty());
}

TEST(HubLiveness, HeartbeatsAreDueOncePerInterval) {
  HubLiveness hub(milliseconds(100), 3);
  EXPECT_TRUE(hub.heartbeat_due(t0 + milliseconds(1)));
  EXPECT_FALSE(hub.heartbeat_due(t0 + milliseconds(50)));
  EXPECT_FALSE(hub.heartbeat_due(t0 + milliseconds(100)));
  EXPECT_TRUE(hub.heartbeat_due(t0 + milliseconds(101)));
}

TEST(PeerLiveness, SilentHubMeansReconnectWithDoublingPausesThatResetOnContact) {
  PeerLiveness peer(milliseconds(100), 3, milliseconds(350), t0);
  EXPECT_FALSE(peer.hub_dead(t0 + milliseconds(300)));
  EXPECT_TRUE(peer.hub_dead(t0 + milliseconds(301)));
  EXPECT_EQ(peer.reconnect_pause(), milliseconds(100));
  EXPECT_EQ(peer.reconnect_pause(), milliseconds(200));
  EXPECT_EQ(peer.reconnect_pause(), milliseconds(350));  // capped
  EXPECT_EQ(peer.reconnect_pause(), milliseconds(350));
  peer.reconnected(t0 + milliseconds(1000));
  EXPECT_FALSE(peer.hub_dead(t0 + milliseconds(1200)));  // a new connection gets a full period
  peer.seen(t0 + milliseconds(1250));
  EXPECT_EQ(peer.reconnect_pause(), milliseconds(100));  // contact resets the backoff
}

TEST(PeerLiveness, HeartbeatTiming) {
  PeerLiveness peer(milliseconds(100), 3, milliseconds(1000), t0);
  EXPECT_TRUE(peer.heartbeat_due(t0));
  EXPECT_EQ(peer.until_heartbeat(t0 + milliseconds(30)), milliseconds(70));
  EXPECT_FALSE(peer.heartbeat_due(t0 + milliseconds(99)));
  EXPECT_TRUE(peer.heartbeat_due(t0 + milliseconds(100)));
  EXPECT_EQ(peer.until_heartbeat(t0 + milliseconds(500)), milliseconds(0));
}

}  // namespace
}  // namespace seqpipe::common
