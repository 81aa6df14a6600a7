// The internal stage protocol: every kind round-trips, malformed and hostile messages are error
// values, and random mutations never crash the decoder.
#include "seqpipe/common/stage_messages.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

namespace seqpipe::stage {
namespace {

using protocol::ErrorCode;

WorkItem full_item() {
  WorkItem w;
  w.request = (uint64_t{1} << 40) + 7;
  w.index = 3;
  w.gateway = std::string(
      "gw\0"
      "1",
      4);
  w.batcher = "ipc:///run/b2-in.sock";
  w.deadline_unix_us = 1'700'000'000'000'000;
  w.params = {.max_new_tokens = 11,
              .num_beams = 4,
              .length_penalty = 1.0f,
              .min_new_tokens = 2,
              .return_scores = true,
              .priority = 3};
  w.text = "teh speling";
  w.ids = {12, 0, 31999, 1};
  w.rows = 2;
  const float values[4] = {1.5f, -0.0f, 3e-38f, 1e30f};
  w.hidden.assign(reinterpret_cast<const char*>(values), sizeof(values));
  w.score = -0.357759f;
  w.timings = {1, 2, 3, 4, 5, 6};
  return w;
}

StageMessage decoded(const std::string& bytes) {
  auto r = decode(bytes);
  if (auto* e = std::get_if<protocol::Error>(&r)) ADD_FAILURE() << e->message;
  return std::holds_alternative<StageMessage>(r) ? std::get<StageMessage>(r) : StageMessage{};
}

protocol::Error error_of(const std::string& bytes, const Limits& limits = {}) {
  auto r = decode(bytes, limits);
  if (!std::holds_alternative<protocol::Error>(r)) {
    ADD_FAILURE() << "decoded a malformed message";
    return {};
  }
  return std::get<protocol::Error>(r);
}

TEST(StageMessages, EveryKindRoundTrips) {
  for (int k = 0; k <= static_cast<int>(MessageKind::kHeartbeat); ++k) {
    WorkItem minimal;
    minimal.request = 9;
    StageMessage m{static_cast<MessageKind>(k), 5, {full_item(), minimal}};
    EXPECT_EQ(decoded(encode(m)), m) << kind_name(m.kind);
  }
  StageMessage with_error{MessageKind::kResult, 0, {full_item()}};
  with_error.items[0].error =
      protocol::Error{ErrorCode::kTooLong, "texts[0] is 300 tokens, at most 128"};
  EXPECT_EQ(decoded(encode(with_error)), with_error);
  EXPECT_EQ(decoded(encode(StageMessage{MessageKind::kReady, 32, {}})).credits, 32);
  StageMessage with_alternatives{MessageKind::kDecoded, 4, {full_item()}};
  with_alternatives.items[0].alternatives = {{0, 5, 1}, {0, 7, 7, 1}};
  EXPECT_EQ(decoded(encode(with_alternatives)), with_alternatives);
}

TEST(StageMessages, AlternativesAreBounded) {
  StageMessage m{MessageKind::kDecoded, 0, {full_item()}};
  m.items[0].alternatives.assign(16, {0, 1});  // one more than beam search can return
  EXPECT_NE(error_of(encode(m)).message.find("alt must be an array of at most 15 id arrays"),
            std::string::npos);
  m.items[0].alternatives = {{0, -1}};
  EXPECT_NE(error_of(encode(m)).message.find("alt[0][1] must be a token id"), std::string::npos);
}

std::string patch(std::string bytes, const std::string& from, const std::string& to) {
  const size_t at = bytes.find(from);
  if (at == std::string::npos)
    ADD_FAILURE() << "pattern not found";
  else
    bytes.replace(at, from.size(), to);
  return bytes;
}

TEST(StageMessages, MalformedMessagesAreErrorsNamingTheProblem) {
  const std::string good = encode(StageMessage{MessageKind::kSequence, 0, {full_item()}});
  EXPECT_NE(error_of("\xc1").message.find("msgpack"), std::string::npos);  // 0xc1 is never used
  EXPECT_NE(error_of(good + "x").message.find("trailing"), std::string::npos);
  EXPECT_NE(error_of(good.substr(0, good.size() / 2)).message.find("msgpack"), std::string::npos);
  EXPECT_NE(error_of("\x90").message.find("not a map"), std::string::npos);  // an empty array
  EXPECT_NE(error_of(patch(good, "\xa4kind\xa8sequence", "\xa4kind\xa8sequencx"))
                .message.find("unknown kind"),
            std::string::npos);
  EXPECT_NE(error_of(patch(good, "\xa1v\x01", "\xa1v\x02")).message.find("v must be"),
            std::string::npos);
  EXPECT_NE(
      error_of(patch(good, "\xa1x\xc0", "\xa1y\xc0")).message.find("unknown field 'items[0].y'"),
      std::string::npos);
  WorkItem bad_rows = full_item();
  bad_rows.hidden = "abc";  // not whole float32 values
  EXPECT_NE(error_of(encode(StageMessage{MessageKind::kEncoded, 0, {bad_rows}}))
                .message.find("items[0].h"),
            std::string::npos);
  EXPECT_NE(error_of(encode(StageMessage{MessageKind::kSequence, 0, {full_item(), full_item()}}),
                     Limits{.max_items = 1})
                .message.find("items"),
            std::string::npos);
  EXPECT_EQ(error_of(good, Limits{.max_message_bytes = 16}).code, ErrorCode::kTooLong);
  WorkItem nan_score = full_item();  // found by tests/fuzz: NaN never round-trips equal
  nan_score.score = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(error_of(encode(StageMessage{MessageKind::kResult, 0, {nan_score}}))
                .message.find("items[0].s"),
            std::string::npos);
}

TEST(StageMessages, HostileHeadersAreRefusedWithoutAllocating) {
  // A real message whose `items` array header (its last byte: an empty fixarray) is replaced by
  // one claiming 2^31 elements, in 5 bytes.
  std::string bytes = encode(StageMessage{MessageKind::kSequence, 0, {}});
  ASSERT_EQ(bytes.back(), '\x90');
  bytes.pop_back();
  bytes += std::string("\xdd\x80\x00\x00\x00", 5);
  const protocol::Error e = error_of(bytes);
  EXPECT_NE(e.message.find("array size overflow"), std::string::npos) << e.message;
  std::string deep(10000, '\x91');  // 10000 nested one-element arrays
  deep += '\x00';
  EXPECT_NE(error_of(deep).message.find("msgpack"), std::string::npos);
}

TEST(StageMessages, RandomMutationsNeverCrash) {
  const std::string good =
      encode(StageMessage{MessageKind::kDecode, 3, {full_item(), full_item()}});
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int n = 0; n < 20000; ++n) {
    std::string m = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % m.size();
      switch (rng() % 3) {
        case 0:
          m[at] = static_cast<char>(rng());
          break;
        case 1:
          m.erase(at, 1 + rng() % 8);
          break;
        default:
          m.insert(at, 1, static_cast<char>(rng()));
          break;
      }
      if (m.empty()) m = "\x00";
    }
    auto r = decode(m);
    if (auto* s = std::get_if<StageMessage>(&r)) {
      ++accepted;
      EXPECT_EQ(decoded(encode(*s)), *s) << "an accepted message survives its own round trip";
    } else {
      EXPECT_FALSE(std::get<protocol::Error>(r).message.empty());
    }
  }
  RecordProperty("accepted", accepted);
}

}  // namespace
}  // namespace seqpipe::stage
