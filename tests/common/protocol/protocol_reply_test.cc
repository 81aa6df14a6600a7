// The protocol's replies (docs/PROTOCOL.md): round trips with exactly the documented keys, and
// malformed replies read as errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <msgpack.hpp>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "seqpipe/protocol/protocol.h"
#include "wire_builders.h"

namespace seqpipe::protocol {
namespace {

using ::testing::HasSubstr;
using namespace wire_test;

// --- Replies ---------------------------------------------------------------------------------

Timings some_timings() {
  return {.queue_us = 1,
          .tokenize_us = 22,
          .batch_wait_us = 333,
          .encode_us = 4444,
          .decode_us = 55555,
          .postprocess_us = 6,
          .total_us = 1ull << 40};
}

Reply decode_reply_ok(const std::string& bytes) {
  auto result = decode_reply(as_bytes(bytes));
  if (auto* error = std::get_if<Error>(&result)) {
    ADD_FAILURE() << "not a reply: " << error->message;
    return {};
  }
  return std::get<Reply>(result);
}

// The top-level keys of an encoded reply, in order.
std::vector<std::string> keys_of(const std::string& bytes) {
  msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
  std::vector<std::string> keys;
  for (const auto& kv : handle.get().via.map) keys.push_back(kv.key.as<std::string>());
  return keys;
}

TEST(ProtocolReply, SingleTextRoundTripsWithExactlyTheDocumentedKeys) {
  Reply reply;
  reply.id = "r1";
  reply.texts = {"I have an apple"};
  reply.timings = some_timings();
  const std::string bytes = encode_reply(reply);
  EXPECT_EQ(decode_reply_ok(bytes), reply);
  EXPECT_EQ(keys_of(bytes), (std::vector<std::string>{"v", "id", "status", "text", "timings_us"}));
  msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
  const auto& root = handle.get().via.map;
  EXPECT_EQ(root.ptr[0].val.as<int>(), 1);
  EXPECT_EQ(root.ptr[2].val.as<std::string>(), "ok");
  std::set<std::string> timing_keys;
  for (const auto& kv : root.ptr[4].val.via.map) timing_keys.insert(kv.key.as<std::string>());
  EXPECT_EQ(timing_keys, (std::set<std::string>{"queue", "tokenize", "batch_wait", "encode",
                                                "decode", "postprocess", "total"}));
}

TEST(ProtocolStream, PartialRepliesCarryOnlyVIdStatusAndText) {
  Reply partial;
  partial.id = "r1";
  partial.partial = true;
  partial.texts = {"I have "};
  const std::string bytes = encode_reply(partial);
  EXPECT_EQ(keys_of(bytes), (std::vector<std::string>{"v", "id", "status", "text"}));
  EXPECT_EQ(decode_reply_ok(bytes), partial);
}

TEST(ProtocolReply, BatchWithScoresRoundTrips) {
  Reply reply;
  reply.id = "batch-2";
  reply.batch_form = true;
  reply.texts = {"a", "", "c\xc3\xa9"};
  reply.scores = std::vector<float>{-0.25f, -1.5f, 0.0f};
  reply.timings = some_timings();
  const std::string bytes = encode_reply(reply);
  EXPECT_EQ(decode_reply_ok(bytes), reply);
  EXPECT_EQ(keys_of(bytes),
            (std::vector<std::string>{"v", "id", "status", "texts", "scores", "timings_us"}));
}

TEST(ProtocolReply, SequencesRoundTripOnePerTextWithTheirScores) {
  Reply reply;
  reply.id = "n-best";
  reply.batch_form = true;
  reply.texts = {"a", "b"};
  reply.sequences = std::vector<std::vector<Sequence>>{{{"a", -0.5f}, {"aa", -0.75f}},
                                                       {{"b", -0.25f}, {"bb", -2.0f}}};
  const std::string bytes = encode_reply(reply);
  EXPECT_EQ(decode_reply_ok(bytes), reply);
  EXPECT_EQ(keys_of(bytes),
            (std::vector<std::string>{"v", "id", "status", "texts", "sequences", "timings_us"}));
}

TEST(ProtocolReply, UsageRoundTripsOnePerTextWithTheReasonByName) {
  Reply reply;
  reply.id = "u";
  reply.batch_form = true;
  reply.texts = {"a", "b", "c"};
  reply.usage = {
      {5, 3, FinishReason::kLength}, {9, 4, FinishReason::kEos}, {2, 1, FinishReason::kStop}};
  const std::string bytes = encode_reply(reply);
  EXPECT_EQ(decode_reply_ok(bytes), reply);
  EXPECT_EQ(keys_of(bytes),
            (std::vector<std::string>{"v", "id", "status", "texts", "usage", "timings_us"}));
  msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
  const auto& first = handle.get().via.map.ptr[4].val.via.array.ptr[0].via.map;
  ASSERT_EQ(first.size, 3u);
  EXPECT_EQ(first.ptr[0].key.as<std::string>(), "prompt_tokens");
  EXPECT_EQ(first.ptr[0].val.as<int>(), 5);
  EXPECT_EQ(first.ptr[1].key.as<std::string>(), "completion_tokens");
  EXPECT_EQ(first.ptr[1].val.as<int>(), 3);
  EXPECT_EQ(first.ptr[2].key.as<std::string>(), "finish_reason");
  EXPECT_EQ(first.ptr[2].val.as<std::string>(), "length");
}

TEST(ProtocolReply, FinishReasonsHaveOneWireNameEach) {
  for (FinishReason reason : {FinishReason::kEos, FinishReason::kLength, FinishReason::kStop})
    EXPECT_EQ(parse_finish_reason(wire_name(reason)), reason);
  EXPECT_EQ(wire_name(FinishReason::kEos), "eos");
  EXPECT_EQ(parse_finish_reason("eos_token"), std::nullopt);
}

TEST(ProtocolReply, PartialAndErrorRepliesCarryNoUsage) {
  Reply partial;
  partial.partial = true;
  partial.texts = {"I "};
  partial.usage = {{1, 1, FinishReason::kEos}};
  EXPECT_EQ(keys_of(encode_reply(partial)),
            (std::vector<std::string>{"v", "id", "status", "text"}));
  Reply error = error_reply("e", {ErrorCode::kInternal, "x"});
  error.usage = {{1, 1, FinishReason::kEos}};
  EXPECT_EQ(keys_of(encode_reply(error)),
            (std::vector<std::string>{"v", "id", "status", "error", "timings_us"}));
}

TEST(ProtocolReply, SingleTextWithScoreCarriesAnArrayOfOne) {
  Reply reply;
  reply.texts = {"x"};
  reply.scores = std::vector<float>{-3.0f};
  const std::string bytes = encode_reply(reply);
  EXPECT_EQ(decode_reply_ok(bytes), reply);
  EXPECT_EQ(keys_of(bytes),
            (std::vector<std::string>{"v", "id", "status", "text", "scores", "timings_us"}));
}

TEST(ProtocolReply, ErrorRoundTripsWithoutTexts) {
  Reply reply = error_reply("r3", {ErrorCode::kDeadlineExceeded, "timeout_ms (50) passed"});
  reply.timings.queue_us = 50000;
  const std::string bytes = encode_reply(reply);
  EXPECT_EQ(decode_reply_ok(bytes), reply);
  EXPECT_EQ(keys_of(bytes), (std::vector<std::string>{"v", "id", "status", "error", "timings_us"}));
  msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
  const auto& error = handle.get().via.map.ptr[3].val.via.map;
  ASSERT_EQ(error.size, 2u);
  EXPECT_EQ(error.ptr[0].key.as<std::string>(), "code");
  EXPECT_EQ(error.ptr[0].val.as<std::string>(), "deadline_exceeded");
  EXPECT_EQ(error.ptr[1].key.as<std::string>(), "message");
}

TEST(ProtocolReply, EveryErrorCodeRoundTrips) {
  for (ErrorCode code : {ErrorCode::kInvalidArgument, ErrorCode::kTooLong,
                         ErrorCode::kDeadlineExceeded, ErrorCode::kOverloaded, ErrorCode::kInternal,
                         ErrorCode::kUnavailable, ErrorCode::kCancelled}) {
    const Reply reply = error_reply("", {code, std::string(wire_name(code))});
    EXPECT_EQ(decode_reply_ok(encode_reply(reply)), reply);
  }
}

TEST(ProtocolReply, ClientsIgnoreUnknownFieldsAndUnknownCodes) {
  const std::string future_ok =
      encode(map({{"v", integer(1)},
                  {"id", str("r")},
                  {"status", str("ok")},
                  {"text", str("fine")},
                  {"model", str("t5-small")},
                  {"timings_us", map({{"total", integer(9)}, {"gpu", integer(3)}})}}));
  const Reply ok = decode_reply_ok(future_ok);
  EXPECT_EQ(ok.texts, std::vector<std::string>{"fine"});
  EXPECT_TRUE(ok.usage.empty());  // a server older than usage
  EXPECT_EQ(ok.timings.total_us, 9u);
  EXPECT_EQ(ok.timings.queue_us, 0u);

  const std::string future_error =
      encode(map({{"v", integer(1)},
                  {"id", str("r")},
                  {"status", str("error")},
                  {"error", map({{"code", str("throttled")}, {"message", str("by client")}})}}));
  const Reply error = decode_reply_ok(future_error);
  EXPECT_FALSE(error.ok);
  ASSERT_TRUE(error.error);
  EXPECT_EQ(error.error->code, ErrorCode::kInternal);
  EXPECT_EQ(error.error->message, "by client");

  // A finish reason added later reads as stop; other keys of a usage map are ignored.
  const std::string future_usage =
      encode(map({{"v", integer(1)},
                  {"id", str("r")},
                  {"status", str("ok")},
                  {"text", str("fine")},
                  {"usage", array({map({{"prompt_tokens", integer(4)},
                                        {"completion_tokens", integer(2)},
                                        {"finish_reason", str("content_filter")},
                                        {"cached_tokens", integer(1)}})})}}));
  const Reply later = decode_reply_ok(future_usage);
  ASSERT_EQ(later.usage.size(), 1u);
  EXPECT_EQ(later.usage[0], (Usage{4, 2, FinishReason::kStop}));
}

TEST(ProtocolReply, MalformedRepliesAreErrors) {
  const Fields ok = {
      {"v", integer(1)}, {"id", str("r")}, {"status", str("ok")}, {"text", str("t")}};
  EXPECT_TRUE(std::holds_alternative<Reply>(decode_reply(as_bytes(encode(map(ok))))));
  const std::string cases[] = {
      "",
      "\xc1",
      encode(array({})),
      encode(map(with(ok, "v", integer(2)))),
      encode(map(without(ok, "v"))),
      encode(map(without(ok, "id"))),
      encode(map(with(ok, "status", str("maybe")))),
      encode(map(without(ok, "text"))),
      encode(map(with(ok, "texts", array({str("t")})))),
      encode(map(with(ok, "scores", array({real(1.0), real(2.0)})))),
      encode(map(with(ok, "usage", array({})))),
      encode(
          map(with(ok, "usage",
                   array({map({{"prompt_tokens", integer(1)}, {"finish_reason", str("eos")}})})))),
      encode(map(with(ok, "usage",
                      array({map({{"prompt_tokens", integer(-1)},
                                  {"completion_tokens", integer(1)},
                                  {"finish_reason", str("eos")}})})))),
      encode(map(with(ok, "timings_us", map({{"total", integer(-1)}})))),
      encode(map(with(ok, "status", str("error")))),
      nested_arrays(100),
  };
  for (const std::string& bytes : cases) {
    EXPECT_TRUE(std::holds_alternative<Error>(decode_reply(as_bytes(bytes))))
        << testing::PrintToString(bytes);
  }
}

}  // namespace
}  // namespace seqpipe::protocol
