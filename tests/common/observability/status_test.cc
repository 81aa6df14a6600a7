// The status reply `seqpipe status` reads from the hubs: round trip, and garbage is refused.
#include "seqpipe/observability/status.h"

#include <gtest/gtest.h>

#include <chrono>
#include <msgpack.hpp>
#include <string>
#include <utility>

namespace seqpipe::status {
namespace {

TEST(Status, RoundTrips) {
  const std::vector<StageStatus> stages{{.stage = "gateway",
                                         .replicas = 1,
                                         .in_flight = 3,
                                         .queued = 2,
                                         .free_credits = kNoCredits,
                                         .uptime_s = 3700,
                                         .requests = 1000,
                                         .errors = 7,
                                         .client_errors = 5,
                                         .about = "models speller-t5/1 (models/speller-t5)"},
                                        {.stage = "decoder",
                                         .replicas = 2,
                                         .in_flight = 40,
                                         .queued = 5,
                                         .free_credits = 24,
                                         .lost = 3}};
  EXPECT_EQ(decode(encode(stages)), stages);
  EXPECT_EQ(decode(encode({})), std::vector<StageStatus>{});
}

TEST(Status, AHubOfAnOlderBuildLeavesTheNewFieldsZero) {
  msgpack::sbuffer old;
  msgpack::packer<msgpack::sbuffer> p(old);
  p.pack_array(1);
  p.pack_map(5);
  for (const auto& [key, value] : {std::pair<std::string, int>{"replicas", 2},
                                   {"in_flight", 1},
                                   {"queued", 0},
                                   {"free_credits", 7}}) {
    p.pack(key);
    p.pack(value);
  }
  p.pack("stage");
  p.pack("encoder");
  const auto stages = decode(std::string_view(old.data(), old.size()));
  ASSERT_TRUE(stages.has_value());
  EXPECT_EQ(stages->at(0),
            (StageStatus{.stage = "encoder", .replicas = 2, .in_flight = 1, .free_credits = 7}));
}

TEST(Status, TheHubsOwnRowCarriesItsUptime) {
  const auto started = std::chrono::steady_clock::now() - std::chrono::seconds(90);
  const auto stages = with_uptime({{.stage = "batcher"}, {.stage = "encoder"}}, started);
  EXPECT_EQ(stages.at(0).uptime_s, 90);
  EXPECT_EQ(stages.at(1).uptime_s, 0);
}

TEST(Status, TheHubsOwnRowSaysWhatItServesWithinWhatDecodeTakes) {
  const auto started = std::chrono::steady_clock::now();
  const auto stages = with_uptime({{.stage = "gateway"}, {.stage = "tokenizer"}}, started,
                                  "models a/1 (/m/a/1); HTTP :8000");
  EXPECT_EQ(stages.at(0).about, "models a/1 (/m/a/1); HTTP :8000");
  EXPECT_EQ(stages.at(1).about, "");
  const auto long_line = with_uptime({{.stage = "gateway"}}, started, std::string(10000, 'x'));
  EXPECT_EQ(long_line.at(0).about.size(), 2048u);
  EXPECT_EQ(decode(encode(long_line)), long_line);
}

TEST(Status, RefusesWhatIsNotAStatusReply) {
  EXPECT_FALSE(decode(kProbe).has_value());
  EXPECT_FALSE(decode("").has_value());
  EXPECT_FALSE(
      decode("\x91\x81\xa5stage\x01").has_value());  // [{"stage": 1}]: wrong type, fields missing
  // A few bytes claiming a 3.7-billion-element array (found by the fuzzer): refused, not allocated.
  EXPECT_FALSE(decode(std::string("\xdd\xdd\xdd\xdd\xdd", 5)).has_value());
  // Numbers go through the protocol's checked readers: out of range, or not integers, refused.
  auto row_with = [](const char* key, auto value) {
    msgpack::sbuffer bytes;
    msgpack::packer<msgpack::sbuffer> p(bytes);
    p.pack_array(1);
    p.pack_map(5);
    p.pack("stage"), p.pack("encoder");
    for (const char* other : {"replicas", "in_flight", "queued", "free_credits"}) {
      p.pack(other);
      if (std::string_view(other) == key) {
        p.pack(value);
      } else {
        p.pack(1);
      }
    }
    return std::string(bytes.data(), bytes.size());
  };
  EXPECT_TRUE(decode(row_with("queued", 5)).has_value());
  EXPECT_FALSE(decode(row_with("queued", int64_t{1} << 40)).has_value());
  EXPECT_FALSE(decode(row_with("replicas", 2.5)).has_value());
  EXPECT_FALSE(decode(row_with("in_flight", "3")).has_value());
  std::string truncated = encode({{"encoder", 2, 1, 0, 7}});
  truncated.pop_back();
  EXPECT_FALSE(decode(truncated).has_value());
}

// A model version is ready when every worker stage has a live replica of it; a hub that did not
// answer makes none ready.
TEST(Status, AModelVersionIsReadyWhenEachStageHasALiveReplicaOfIt) {
  auto line = [](std::string stage, int replicas) {
    return StageStatus{.stage = std::move(stage), .replicas = replicas};
  };
  PipelineStatus st;
  st.hubs.push_back({"gateway", "ipc://g",
                     std::vector<StageStatus>{line("tokenizer a/1", 1), line("tokenizer b/1", 1)}});
  st.hubs.push_back(
      {"batcher", "ipc://b",
       std::vector<StageStatus>{line("encoder a/1", 1), line("decoder a/1", 2),
                                line("postprocessor a/1", 1), line("encoder b/1", 1),
                                line("decoder b/1", 0), line("postprocessor b/1", 1)}});
  EXPECT_TRUE(st.ready_for("a/1"));
  EXPECT_FALSE(st.ready_for("b/1"));  // its decoder is gone
  EXPECT_FALSE(st.ready_for("c/1"));  // not served at all
  st.hubs[1].stages.reset();          // the batcher is down
  EXPECT_FALSE(st.ready_for("a/1"));
}

}  // namespace
}  // namespace seqpipe::status
