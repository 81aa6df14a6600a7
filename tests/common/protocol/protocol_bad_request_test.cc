// Malformed client requests (docs/PROTOCOL.md): each answered with the right code and a message
// naming the field, hostile frames refused by limits, and a bounded random-mutation run.
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

// --- Malformed requests: code and a message naming the problem --------------------------------

struct BadRequest {
  std::string name;
  std::string bytes;
  ErrorCode code;
  std::string message;  // a substring of the error message
};

void PrintTo(const BadRequest& bad, std::ostream* os) {
  *os << bad.name;
}

constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;
constexpr ErrorCode kTooLong = ErrorCode::kTooLong;

// The framing and the version.
std::vector<BadRequest> framing_cases() {
  const std::string valid = encode(map(base()));
  return {
      // Framing.
      {"Empty", "", kInvalid, "message is empty"},
      {"NotMsgpack", "\xc1", kInvalid, "not valid msgpack"},
      {"Truncated", valid.substr(0, valid.size() - 3), kInvalid, "truncated"},
      {"TrailingBytes", valid + '\xc0', kInvalid, "1 bytes after"},
      {"TopLevelArray", encode(array({integer(1), str("a")})), kInvalid,
       "request must be a msgpack map, got an array"},
      {"TopLevelString", encode(str("hello")), kInvalid, "got a string"},
      {"NonStringKey", encode([](Packer& p) {
         p.pack_map(2);
         p.pack(std::string("v"));
         p.pack(1);
         p.pack(7);
         p.pack(std::string("a"));
       }),
       kInvalid, "field names must be strings, got 7"},
      {"DuplicateText", encode(map({{"v", integer(1)}, {"text", str("a")}, {"text", str("b")}})),
       kInvalid, "duplicate field 'text'"},
      // Version.
      {"MissingV", encode(map(without(base(), "v"))), kInvalid, "missing field 'v'"},
      {"WrongV", encode(map(with(base(), "v", integer(2)))), kInvalid,
       "v must be 1 (the protocol version), got 2"},
      {"StringV", encode(map(with(base(), "v", str("1")))), kInvalid, "v must be 1"},
      {"FloatV", encode(map(with(base(), "v", real(1.0)))), kInvalid, "got float 1"},
  };
}

// text / texts, their sizes and their UTF-8.
std::vector<BadRequest> text_cases() {
  const std::string big_text(4097, 'a');
  std::vector<Value> too_many_texts(65, str("t"));
  return {
      // text / texts.
      {"NeitherTextNorTexts", encode(map(without(base(), "text"))), kInvalid,
       "missing field 'text' (or 'texts')"},
      {"BothTextAndTexts", encode(map(with(base(), "texts", array({str("a")})))), kInvalid,
       "both 'text' and 'texts'"},
      {"TextInteger", encode(map(with(base(), "text", integer(5)))), kInvalid,
       "text must be a string, got 5"},
      {"TextBinary", encode(map(with(base(), "text", binary("abc")))), kInvalid,
       "text must be a string, got binary data"},
      {"TextNil", encode(map(with(base(), "text", nil()))), kInvalid, "got nil"},
      {"TextEmpty", encode(map(with(base(), "text", str("")))), kInvalid, "text is empty"},
      {"TextWhitespace", encode(map(with(base(), "text", str(" \t\r\n ")))), kInvalid,
       "text is only whitespace"},
      {"TextUnicodeWhitespace",
       encode(map(with(base(), "text", str("\xc2\xa0\xe3\x80\x80\xe2\x80\xa8")))), kInvalid,
       "text is only whitespace"},
      {"TextTooLarge", encode(map(with(base(), "text", str(big_text)))), kTooLong,
       "text is 4097 bytes, at most 4096"},
      {"TextsNotArray", encode(map(with(without(base(), "text"), "texts", str("a")))), kInvalid,
       "texts must be an array of strings, got a string"},
      {"TextsEmpty", encode(map(with(without(base(), "text"), "texts", array({})))), kInvalid,
       "texts must not be empty"},
      {"TextsWithInteger",
       encode(map(with(without(base(), "text"), "texts", array({str("a"), str("b"), integer(3)})))),
       kInvalid, "texts[2] must be a string, got 3"},
      {"TextsWithEmpty",
       encode(map(with(without(base(), "text"), "texts", array({str("a"), str("")})))), kInvalid,
       "texts[1] is empty"},
      {"TextsWithWhitespace",
       encode(map(with(without(base(), "text"), "texts", array({str("  ")})))), kInvalid,
       "texts[0] is only whitespace"},
      {"TextsTooMany", encode(map(with(without(base(), "text"), "texts", array(too_many_texts)))),
       kTooLong, "texts has 65 elements, at most 64"},
      {"TextsElementTooLarge",
       encode(map(with(without(base(), "text"), "texts", array({str("a"), str(big_text)})))),
       kTooLong, "texts[1] is 4097 bytes, at most 4096"},
      // UTF-8, several kinds.
      {"Utf8LoneContinuation",
       encode(map(
           with(without(base(), "text"), "texts", array({str("a"), str("b"), str("hello\x80")})))),
       kInvalid, "texts[2] is not valid UTF-8 (byte 5)"},
      {"Utf8Overlong", encode(map(with(base(), "text", str("a\xc0\xaf")))), kInvalid,
       "text is not valid UTF-8 (byte 1)"},
      {"Utf8Overlong3", encode(map(with(base(), "text", str("\xe0\x80\xaf")))), kInvalid,
       "text is not valid UTF-8 (byte 0)"},
      {"Utf8Surrogate", encode(map(with(base(), "text", str("ab\xed\xa0\x80")))), kInvalid,
       "text is not valid UTF-8 (byte 2)"},
      {"Utf8BeyondUnicode", encode(map(with(base(), "text", str("\xf4\x90\x80\x80")))), kInvalid,
       "text is not valid UTF-8 (byte 0)"},
      {"Utf8Truncated", encode(map(with(base(), "text", str("abc\xe2\x82")))), kInvalid,
       "text is not valid UTF-8 (byte 3)"},
  };
}

// Unknown fields (a future `op` among them: v1 has none) and params as a whole.
std::vector<BadRequest> field_cases() {
  return {
      // Unknown fields, including a future `op` (v1 has none).
      {"UnknownField", encode(map(with(base(), "foo", integer(1)))), kInvalid,
       "unknown field 'foo'"},
      {"UnknownOp", encode(map(with(base(), "op", str("health")))), kInvalid,
       "op must be \"generate\" or \"cancel\", got 'health'"},
      {"UnknownFieldEscaped",
       encode(map(with(base(),
                       "b\xff"
                       "d\n",
                       integer(1)))),
       kInvalid, "unknown field 'b\\xffd\\x0a'"},
      // params.
      {"ParamsNotMap", encode(map(with(base(), "params", array({})))), kInvalid,
       "params must be a map, got an array"},
      {"ParamsNil", encode(map(with(base(), "params", nil()))), kInvalid,
       "params must be a map, got nil"},
      {"ParamsNonStringKey",
       encode(map(with(base(), "params",
                       [](Packer& p) {
                         p.pack_map(1);
                         p.pack(1);
                         p.pack(1);
                       }))),
       kInvalid, "params keys must be strings, got 1"},
      {"UnknownParam", encode(map(with_params({{"temprature", real(0.7)}}))), kInvalid,
       "unknown field 'params.temprature'"},
  };
}

// Each generation option out of its range or of the wrong type.
std::vector<BadRequest> generation_option_cases() {
  return {
      {"TopPZero", encode(map(with_params({{"top_p", real(0.0)}}))), kInvalid,
       "params.top_p must be in (0, 1], got float 0"},
      {"TopPAboveOne", encode(map(with_params({{"top_p", real(1.5)}}))), kInvalid,
       "params.top_p must be in (0, 1], got float 1.5"},
      {"TemperatureNegative", encode(map(with_params({{"temperature", real(-1.0)}}))), kInvalid,
       "params.temperature must be > 0, got float -1"},
      {"TopKNegative", encode(map(with_params({{"top_k", integer(-1)}}))), kInvalid,
       "params.top_k must be an integer in [0, 2147483647], got -1"},
      {"RepetitionPenaltyZero", encode(map(with_params({{"repetition_penalty", integer(0)}}))),
       kInvalid, "params.repetition_penalty must be > 0, got 0"},
      {"NoRepeatNgramNegative", encode(map(with_params({{"no_repeat_ngram_size", integer(-2)}}))),
       kInvalid, "params.no_repeat_ngram_size must be an integer in [0, 4096], got -2"},
      {"SeedNegative", encode(map(with_params({{"seed", integer(-5)}}))), kInvalid,
       "params.seed must be an integer in [0, 9223372036854775807], got -5"},
      {"DoSampleString", encode(map(with_params({{"do_sample", str("yes")}}))), kInvalid,
       "params.do_sample must be a boolean, got a string"},
      {"NumReturnSequencesOverBeams",
       encode(map(with_params({{"num_beams", integer(2)}, {"num_return_sequences", integer(3)}}))),
       kInvalid, "params.num_return_sequences (3) must not exceed params.num_beams (2)"},
      {"SampleWithBeams",
       encode(map(with_params({{"num_beams", integer(2)}, {"do_sample", boolean(true)}}))),
       kInvalid, "params.do_sample needs params.num_beams 1"},
      {"StopNotArray", encode(map(with_params({{"stop", str(".")}}))), kInvalid,
       "params.stop must be an array of at most 8 strings, got a string"},
      {"StopEmptyString", encode(map(with_params({{"stop", array({str("a"), str("")})}}))),
       kInvalid, "params.stop[1] must be 1..128 bytes, got 0"},
      {"StopNotUtf8", encode(map(with_params({{"stop", array({str("a\xff")})}}))), kInvalid,
       "params.stop[0] is not valid UTF-8 (byte 1)"},
      {"StopInteger", encode(map(with_params({{"stop", array({integer(1)})}}))), kInvalid,
       "params.stop[0] must be a string, got 1"},
      {"MisspeltParam", encode(map(with_params({{"num_beam", integer(4)}}))), kInvalid,
       "unknown field 'params.num_beam'"},
      {"DuplicateParam",
       encode(map(with_params({{"num_beams", integer(2)}, {"num_beams", integer(3)}}))), kInvalid,
       "duplicate field 'params.num_beams'"},
      {"MaxNewTokensString", encode(map(with_params({{"max_new_tokens", str("5")}}))), kInvalid,
       "params.max_new_tokens must be an integer in [1, 256], got a string"},
      {"MaxNewTokensFloat", encode(map(with_params({{"max_new_tokens", real(5.0)}}))), kInvalid,
       "params.max_new_tokens must be an integer in [1, 256], got float 5"},
      {"MaxNewTokensZero", encode(map(with_params({{"max_new_tokens", integer(0)}}))), kInvalid,
       "params.max_new_tokens must be an integer in [1, 256], got 0"},
      {"MaxNewTokensOverCap", encode(map(with_params({{"max_new_tokens", integer(257)}}))),
       kInvalid, "got 257"},
      {"MaxNewTokensNegative", encode(map(with_params({{"max_new_tokens", integer(-1)}}))),
       kInvalid, "got -1"},
      {"MaxNewTokensHuge",
       encode(map(with_params({{"max_new_tokens", uinteger(18446744073709551615ull)}}))), kInvalid,
       "got 18446744073709551615"},
      {"MaxNewTokensInt32Wrap", encode(map(with_params({{"max_new_tokens", integer(4294967297)}}))),
       kInvalid, "got 4294967297"},
      {"NumBeamsBool", encode(map(with_params({{"num_beams", boolean(true)}}))), kInvalid,
       "params.num_beams must be an integer in [1, 8], got true"},
      {"NumBeamsZero", encode(map(with_params({{"num_beams", integer(0)}}))), kInvalid,
       "params.num_beams must be an integer in [1, 8], got 0"},
      {"NumBeamsNine", encode(map(with_params({{"num_beams", integer(9)}}))), kInvalid,
       "params.num_beams must be an integer in [1, 8], got 9"},
      {"MinNewTokensString", encode(map(with_params({{"min_new_tokens", str("0")}}))), kInvalid,
       "params.min_new_tokens must be an integer in [0, 256], got a string"},
      {"MinNewTokensNegative", encode(map(with_params({{"min_new_tokens", integer(-3)}}))),
       kInvalid, "params.min_new_tokens must be an integer in [0, 256], got -3"},
      {"MinNewTokensAboveMax",
       encode(map(with_params({{"max_new_tokens", integer(10)}, {"min_new_tokens", integer(11)}}))),
       kInvalid, "params.min_new_tokens (11) must not exceed params.max_new_tokens (10)"},
      {"MinNewTokensAboveDefaultMax", encode(map(with_params({{"min_new_tokens", integer(33)}}))),
       kInvalid, "params.min_new_tokens (33) must not exceed params.max_new_tokens (32)"},
      {"LengthPenaltyString", encode(map(with_params({{"length_penalty", str("1.0")}}))), kInvalid,
       "params.length_penalty must be a finite number, got a string"},
      {"LengthPenaltyNan",
       encode(
           map(with_params({{"length_penalty", real(std::numeric_limits<double>::quiet_NaN())}}))),
       kInvalid, "params.length_penalty must be a finite number, got float nan"},
      {"LengthPenaltyInf",
       encode(
           map(with_params({{"length_penalty", real(-std::numeric_limits<double>::infinity())}}))),
       kInvalid, "params.length_penalty must be a finite number, got float -inf"},
      {"LengthPenaltyBeyondFloat", encode(map(with_params({{"length_penalty", real(1e300)}}))),
       kInvalid, "params.length_penalty must be a finite number, got float 1e+300"},
      {"ReturnScoresInteger", encode(map(with_params({{"return_scores", integer(1)}}))), kInvalid,
       "params.return_scores must be a boolean, got 1"},
      {"ReturnScoresString", encode(map(with_params({{"return_scores", str("true")}}))), kInvalid,
       "params.return_scores must be a boolean, got a string"},
  };
}

// timeout_ms, model, version and id.
std::vector<BadRequest> envelope_cases() {
  return {
      // timeout_ms.
      {"TimeoutZero", encode(map(with(base(), "timeout_ms", integer(0)))), kInvalid,
       "timeout_ms must be an integer in [1, 60000], got 0"},
      {"TimeoutTooLarge", encode(map(with(base(), "timeout_ms", integer(60001)))), kInvalid,
       "timeout_ms must be an integer in [1, 60000], got 60001"},
      {"TimeoutNegative", encode(map(with(base(), "timeout_ms", integer(-5)))), kInvalid, "got -5"},
      {"TimeoutFloat", encode(map(with(base(), "timeout_ms", real(100.5)))), kInvalid,
       "timeout_ms must be an integer in [1, 60000], got float 100.5"},
      {"TimeoutString", encode(map(with(base(), "timeout_ms", str("100")))), kInvalid,
       "timeout_ms must be an integer in [1, 60000], got a string"},
      // model, version.
      {"ModelInteger", encode(map(with(base(), "model", integer(3)))), kInvalid,
       "model must be a string, got 3"},
      {"ModelEmpty", encode(map(with(base(), "model", str("")))), kInvalid,
       "model must be 1 to 128 bytes"},
      {"ModelTooLong", encode(map(with(base(), "model", str(std::string(129, 'm'))))), kInvalid,
       "model must be 1 to 128 bytes"},
      {"VersionZero", encode(map(with(base(), "version", integer(0)))), kInvalid,
       "version must be an integer in [1, 1000000], got 0"},
      {"VersionString", encode(map(with(base(), "version", str("2")))), kInvalid,
       "version must be an integer in [1, 1000000], got a string"},
      // id.
      {"IdInteger", encode(map(with(base(), "id", integer(42)))), kInvalid,
       "id must be a string, got 42"},
      {"IdNil", encode(map(with(base(), "id", nil()))), kInvalid, "id must be a string, got nil"},
      {"IdEmpty", encode(map(with(base(), "id", str("")))), kInvalid, "id must not be empty"},
      {"IdTooLong", encode(map(with(base(), "id", str(std::string(257, 'i'))))), kInvalid,
       "id is 257 bytes, at most 256"},
      {"IdInvalidUtf8", encode(map(with(base(), "id", str("req\xc3")))), kInvalid,
       "id is not valid UTF-8 (byte 3)"},
  };
}

// Hostile frames: refused by the unpacking limits, without crashing or allocating much.
std::vector<BadRequest> hostile_frame_cases() {
  return {
      {"DeepNestingInUnknownField", encode(map(with(base(), "foo", raw(nested_arrays(1000))))),
       kInvalid, "nests arrays or maps deeper than 8 levels"},
      {"DeepNestingTopLevel", nested_arrays(100000), kInvalid, "deeper than 8 levels"},
      {"HugeArrayHeaderInField",
       encode(map(with(base(), "foo", raw(std::string("\xdd\x80\x00\x00\x00", 5))))), kTooLong,
       "an array of more than 1024 elements"},
      {"HugeArrayHeaderTopLevel", std::string("\xdd\x80\x00\x00\x00\x01", 6), kTooLong,
       "an array of more than 1024 elements"},
      {"HugeTextsHeader",
       encode(map(with(without(base(), "text"), "texts",
                       raw(std::string("\xdd\xff\xff\xff\xff\xa1x", 7))))),
       kTooLong, "an array of more than 1024 elements"},
      {"HugeMapHeader", std::string("\xdf\x80\x00\x00\x00\xa1v\x01", 8), kInvalid,
       "a map of more than 64 entries"},
      {"HugeStringHeader",
       encode(map(with(base(), "text",
                       raw(std::string("\xdb\xff\xff\xff\xff"
                                       "abc",
                                       8))))),
       kInvalid, "truncated"},
      {"HugeBinHeader",
       encode(map(with(base(), "foo",
                       raw(std::string("\xc6\x7f\xff\xff\xff"
                                       "abc",
                                       8))))),
       kInvalid, "truncated"},
      {"HugeExtHeader",
       encode(map(with(base(), "foo",
                       raw(std::string("\xc9\x7f\xff\xff\xff\x01"
                                       "abc",
                                       9))))),
       kInvalid, "truncated"},
      {"ArrayHeaderBeyondPayload",
       encode(map(with(base(), "foo", raw(std::string("\xdc\x03\xe8\xc0", 4))))), kInvalid,
       "truncated"},
      {"MessageTooLarge", encode(map(with(base(), "foo", str(std::string((1 << 20) + 1, 'x'))))),
       kTooLong, "bytes, at most 1048576"},
  };
}

std::vector<BadRequest> bad_requests() {
  std::vector<BadRequest> all;
  for (auto cases : {framing_cases, text_cases, field_cases, generation_option_cases,
                     envelope_cases, hostile_frame_cases}) {
    for (BadRequest& bad : cases()) all.push_back(std::move(bad));
  }
  return all;
}

class ProtocolBadRequest : public testing::TestWithParam<BadRequest> {};

TEST_P(ProtocolBadRequest, IsRejectedWithCodeAndMessage) {
  const BadRequest& bad = GetParam();
  const RejectedRequest rejected = decode_rejected(bad.bytes);
  EXPECT_EQ(wire_name(rejected.error.code), wire_name(bad.code));
  EXPECT_THAT(rejected.error.message, HasSubstr(bad.message));
}

INSTANTIATE_TEST_SUITE_P(ProtocolCases, ProtocolBadRequest, testing::ValuesIn(bad_requests()),
                         [](const testing::TestParamInfo<BadRequest>& info) {
                           return info.param.name;
                         });

TEST(ProtocolBadRequestLimits, FollowTheConfiguredLimits) {
  Limits limits;
  limits.max_texts = 2;
  limits.max_text_bytes = 3;
  limits.max_id_bytes = 2;
  limits.max_new_tokens_cap = 5;
  limits.max_beams = 2;
  limits.max_timeout_ms = 10;
  limits.max_message_bytes = 64;
  auto expect = [&](const Fields& fields, ErrorCode code, const std::string& message) {
    const RejectedRequest rejected = decode_rejected(encode(map(fields)), limits);
    EXPECT_EQ(wire_name(rejected.error.code), wire_name(code));
    EXPECT_THAT(rejected.error.message, HasSubstr(message));
  };
  const Fields small = with(base(), "text", str("abc"));
  EXPECT_EQ(decode_ok(encode(map(small)), limits).texts[0], "abc");
  expect(with(base(), "text", str("abcd")), ErrorCode::kTooLong, "text is 4 bytes, at most 3");
  expect(with(without(small, "text"), "texts", array({str("a"), str("b"), str("c")})),
         ErrorCode::kTooLong, "texts has 3 elements, at most 2");
  expect(with(small, "id", str("abc")), ErrorCode::kInvalidArgument, "id is 3 bytes, at most 2");
  expect(with(small, "params", map({{"max_new_tokens", integer(6)}})), ErrorCode::kInvalidArgument,
         "params.max_new_tokens must be an integer in [1, 5], got 6");
  expect(with(small, "params", map({{"num_beams", integer(3)}})), ErrorCode::kInvalidArgument,
         "params.num_beams must be an integer in [1, 2], got 3");
  expect(with(small, "timeout_ms", integer(11)), ErrorCode::kInvalidArgument,
         "timeout_ms must be an integer in [1, 10], got 11");
  expect(with(small, "foo", str(std::string(60, 'x'))), ErrorCode::kTooLong, "bytes, at most 64");
}

TEST(ProtocolBadRequestId, ErrorRepliesEchoAValidId) {
  // A DEALER client pipelining requests matches error replies to requests by id.
  const RejectedRequest bad_param =
      decode_rejected(encode(map(with(with_params({{"num_beams", integer(0)}}), "id", str("r9")))));
  EXPECT_EQ(bad_param.id, "r9");
  const RejectedRequest unknown =
      decode_rejected(encode(map(with(with(base(), "id", str("r10")), "bogus", nil()))));
  EXPECT_EQ(unknown.id, "r10");
  const RejectedRequest bad_version =
      decode_rejected(encode(map(with(with(base(), "id", str("r11")), "v", integer(3)))));
  EXPECT_EQ(bad_version.id, "r11");
  const RejectedRequest bad_id = decode_rejected(encode(map(with(base(), "id", integer(5)))));
  EXPECT_EQ(bad_id.id, "");
  EXPECT_EQ(decode_rejected("\xc1").id, "");

  const Reply reply = error_reply(bad_param);
  EXPECT_EQ(reply.id, "r9");
  EXPECT_FALSE(reply.ok);
  ASSERT_TRUE(reply.error);
  EXPECT_EQ(reply.error->code, ErrorCode::kInvalidArgument);
}

TEST(ProtocolStream, RoundTripsAndIsRefusedWhereAPartialTextCannotGrow) {
  Request request;
  request.texts = {"I has a apple"};
  request.stream = true;
  EXPECT_EQ(decode_ok(encode_request(request)), request);
  request.batch_form = true;
  EXPECT_NE(decode_rejected(encode_request(request)).error.message.find("single-text"),
            std::string::npos);
  request.batch_form = false;
  request.params.num_beams = 2;
  EXPECT_EQ(decode_rejected(encode_request(request)).error.code, ErrorCode::kInvalidArgument);
  request.params.num_beams = 1;
  request.params.num_return_sequences = 2;
  EXPECT_EQ(decode_rejected(encode_request(request)).error.code, ErrorCode::kInvalidArgument);
  const RejectedRequest not_boolean =
      decode_rejected(encode(map(with(with(base(), "id", str("s1")), "stream", integer(1)))));
  EXPECT_EQ(not_boolean.id, "s1");
  EXPECT_EQ(not_boolean.error.message, "stream must be a boolean, got 1");
}

TEST(ProtocolBadRequestOrder, VersionIsCheckedBeforeUnknownFields) {
  // A v2 request is told about the version, not about fields this server does not know.
  const RejectedRequest rejected =
      decode_rejected(encode(map(with(with(base(), "v", integer(2)), "stream", boolean(true)))));
  EXPECT_THAT(rejected.error.message, HasSubstr("v must be 1"));
}

// --- Robustness: random mutations of valid requests --------------------------------------------

TEST(ProtocolFuzz, RandomMutationsNeverCrashAndAcceptedRequestsRoundTrip) {
  std::vector<std::string> seeds;
  {
    Request single;
    single.id = "seed-1";
    single.texts = {"I has a apple"};
    single.params.num_beams = 4;
    single.params.return_scores = true;
    single.timeout_ms = 2500;
    seeds.push_back(encode_request(single));
    Request batch;
    batch.texts = {"one", "tw\xc3\xb6", "\xf0\x9f\x98\x80"};
    batch.batch_form = true;
    batch.params.length_penalty = 0.5f;
    seeds.push_back(encode_request(batch));
    seeds.push_back(encode(map(base())));
  }
  std::mt19937 rng(20240531);
  auto uniform = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const Limits limits;
  size_t accepted = 0;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::string bytes = seeds[uniform(seeds.size())];
    const size_t mutations = 1 + uniform(4);
    for (size_t m = 0; m < mutations && !bytes.empty(); ++m) {
      const size_t at = uniform(bytes.size());
      switch (uniform(5)) {
        case 0:  // flip one bit
          bytes[at] = static_cast<char>(bytes[at] ^ (1 << uniform(8)));
          break;
        case 1:  // overwrite a byte
          bytes[at] = static_cast<char>(uniform(256));
          break;
        case 2:  // insert a byte
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                       static_cast<char>(uniform(256)));
          break;
        case 3:  // delete a byte
          bytes.erase(at, 1);
          break;
        case 4:  // cut the tail
          bytes.resize(at);
          break;
      }
    }
    auto result = decode_request(as_bytes(bytes), limits);
    if (auto* request = std::get_if<Request>(&result)) {
      ++accepted;
      ASSERT_FALSE(request->texts.empty());
      // Whatever was accepted is a valid request: it survives its own round trip.
      ASSERT_EQ(decode_ok(encode_request(*request)), *request);
    } else {
      ASSERT_FALSE(std::get<RejectedRequest>(result).error.message.empty());
    }
  }
  // Some mutations (a flipped letter inside a text) keep the request valid.
  EXPECT_GT(accepted, 0u);
}

}  // namespace
}  // namespace seqpipe::protocol
