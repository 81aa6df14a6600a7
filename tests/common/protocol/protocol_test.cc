// The client wire protocol (common/protocol/include/seqpipe/protocol/protocol.h, docs/PROTOCOL.md):
// error codes, priorities, cancels, UTF-8 and request round trips (malformed requests:
// protocol_bad_request_test.cc; replies: protocol_reply_test.cc).
#include "seqpipe/protocol/protocol.h"

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

#include "wire_builders.h"

namespace seqpipe::protocol {
namespace {

using ::testing::HasSubstr;
using namespace wire_test;

// --- Error codes -------------------------------------------------------------------------------

TEST(ProtocolErrorCode, WireNamesAreStableAndRoundTrip) {
  const std::pair<ErrorCode, std::string_view> expected[] = {
      {ErrorCode::kInvalidArgument, "invalid_argument"},
      {ErrorCode::kTooLong, "too_long"},
      {ErrorCode::kDeadlineExceeded, "deadline_exceeded"},
      {ErrorCode::kOverloaded, "overloaded"},
      {ErrorCode::kInternal, "internal"},
      {ErrorCode::kUnavailable, "unavailable"},
      {ErrorCode::kCancelled, "cancelled"}};
  for (const auto& [code, name] : expected) {
    EXPECT_EQ(wire_name(code), name);
    EXPECT_EQ(parse_error_code(name), code);
  }
  EXPECT_EQ(parse_error_code("INTERNAL"), std::nullopt);
  EXPECT_EQ(parse_error_code(""), std::nullopt);
  EXPECT_EQ(parse_error_code("throttled"), std::nullopt);
}

// --- Priority ------------------------------------------------------------------------------------

TEST(ProtocolPriority, IsOptionalRoundTripsAndIsCheckedAgainstTheLevels) {
  Limits three;
  three.priority_levels = 3;
  EXPECT_EQ(decode_ok(encode(map(base())), three).params.priority,
            0);  // not given: the server's default
  EXPECT_EQ(decode_ok(encode(map(with_params({{"priority", integer(1)}}))), three).params.priority,
            1);
  EXPECT_EQ(decode_ok(encode(map(with_params({{"priority", integer(3)}}))), three).params.priority,
            3);
  Request r;
  r.texts = {"x"};
  r.params.priority = 2;
  EXPECT_EQ(decode_ok(encode_request(r), three), r);
  r.params.priority = 0;
  EXPECT_EQ(encode_request(r).find("priority"), std::string::npos);  // 0 is not written
  for (const auto& [value, got] :
       std::vector<std::pair<Value, std::string>>{{integer(0), "got 0"},
                                                  {integer(4), "got 4"},
                                                  {integer(-1), "got -1"},
                                                  {real(1.0), "got float 1"},
                                                  {str("high"), "got a string"}}) {
    const RejectedRequest rejected =
        decode_rejected(encode(map(with_params({{"priority", value}}))), three);
    EXPECT_EQ(rejected.error.code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(rejected.error.message,
                HasSubstr("params.priority must be an integer in [1, 3], " + got +
                          " (1 is the highest of the server's 3 priority levels)"));
  }
  // A server without priorities (1 level) accepts only 1.
  EXPECT_THAT(decode_rejected(encode(map(with_params({{"priority", integer(2)}})))).error.message,
              HasSubstr("[1, 1], got 2 (1 is the highest of the server's 1 priority level)"));
}

// Refused before the document is unpacked (over the size, nesting or texts limits), a request
// still gets its id back when one can be read, so the client waiting on that id is answered.
TEST(ProtocolRequest, RefusalsBeforeUnpackingCarryTheIdWhenReadable) {
  std::vector<Value> many(200, str("a"));
  Value nested = map({{"x", integer(1)}});
  for (int i = 0; i < 11; ++i) nested = map({{"x", nested}});
  Limits small;
  small.max_texts = 100;
  small.max_message_bytes = 1000;
  for (const auto& [fields, code] : std::vector<std::pair<Fields, ErrorCode>>{
           {{{"v", integer(1)}, {"texts", array(many)}, {"id", str("r1")}}, ErrorCode::kTooLong},
           {{{"v", integer(1)}, {"params", nested}, {"id", str("r1")}},
            ErrorCode::kInvalidArgument},
           {{{"id", str("r1")}, {"v", integer(1)}, {"text", str(std::string(2000, 'x'))}},
            ErrorCode::kTooLong}}) {
    const RejectedRequest rejected = decode_rejected(encode(map(fields)), small);
    EXPECT_EQ(rejected.id, "r1") << rejected.error.message;
    EXPECT_EQ(rejected.error.code, code) << rejected.error.message;
  }
  // An id nested below the top level is not the request's.
  const RejectedRequest nested_id = decode_rejected(
      encode(map({{"params", map({{"id", str("no")}})}, {"texts", array(many)}})), small);
  EXPECT_EQ(nested_id.id, "");
}

// --- Cancel requests -----------------------------------------------------------------------------

TEST(ProtocolCancel, RoundTripsAndCarriesOnlyTheId) {
  Request cancel;
  cancel.op = Op::kCancel;
  cancel.id = "r7";
  const std::string bytes = encode_request(cancel);
  EXPECT_EQ(bytes, encode(map({{"v", integer(1)}, {"op", str("cancel")}, {"id", str("r7")}})));
  const Request decoded = decode_ok(bytes);
  EXPECT_EQ(decoded, cancel);
  EXPECT_TRUE(decoded.texts.empty());
  // op "generate" is the default spelled out.
  EXPECT_EQ(decode_ok(encode(map(with(base(), "op", str("generate"))))).op, Op::kGenerate);
  EXPECT_EQ(decode_ok(encode(map(base()))).op, Op::kGenerate);
}

TEST(ProtocolCancel, MalformedCancelsAreRejectedNamingTheProblem) {
  const Fields cancel = {{"v", integer(1)}, {"op", str("cancel")}, {"id", str("r7")}};
  RejectedRequest r = decode_rejected(encode(map(without(cancel, "id"))));
  EXPECT_EQ(r.error.code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error.message, HasSubstr("needs the id"));
  r = decode_rejected(encode(map(with(cancel, "text", str("x")))));
  EXPECT_THAT(r.error.message, HasSubstr("only v, op and id, not 'text'"));
  EXPECT_EQ(r.id, "r7");
  r = decode_rejected(encode(map(with(cancel, "timeout_ms", integer(5)))));
  EXPECT_THAT(r.error.message, HasSubstr("not 'timeout_ms'"));
  r = decode_rejected(encode(map(with(cancel, "op", str("health")))));
  EXPECT_THAT(r.error.message, HasSubstr("op must be \"generate\" or \"cancel\", got 'health'"));
  r = decode_rejected(encode(map(with(cancel, "op", integer(1)))));
  EXPECT_THAT(r.error.message, HasSubstr("op must be"));
  r = decode_rejected(encode(map(with(cancel, "id", integer(7)))));
  EXPECT_THAT(r.error.message, HasSubstr("id must be a string"));
}

// --- UTF-8 --------------------------------------------------------------------------------------

TEST(ProtocolUtf8, AcceptsWellFormedText) {
  for (std::string text : {"", "plain ascii", "caf\xc3\xa9", "\xe2\x82\xac 5", "\xf0\x9f\x98\x80",
                           "\xed\x9f\xbf" /* U+D7FF */, "\xee\x80\x80" /* U+E000 */,
                           "\xf4\x8f\xbf\xbf" /* U+10FFFF */, "\xef\xbf\xbf" /* U+FFFF */}) {
    EXPECT_EQ(find_invalid_utf8(text), std::nullopt) << text;
  }
  EXPECT_EQ(find_invalid_utf8(std::string("a\0b", 3)), std::nullopt);  // NUL is a code point
}

TEST(ProtocolUtf8, ReportsTheOffsetOfTheFirstIllFormedSequence) {
  const std::pair<std::string, size_t> cases[] = {
      {"\x80", 0},              // lone continuation byte
      {"abc\xbf", 3},           // continuation byte after ASCII
      {"ab\xc0\xaf", 2},        // overlong '/' (2 bytes)
      {"\xc1\xbf", 0},          // overlong (C1 lead)
      {"\xe0\x80\xaf", 0},      // overlong '/' (3 bytes)
      {"\xf0\x80\x80\xaf", 0},  // overlong '/' (4 bytes)
      {"x\xed\xa0\x80", 1},     // U+D800, a surrogate
      {"\xed\xbf\xbf", 0},      // U+DFFF, a surrogate
      {"\xf4\x90\x80\x80", 0},  // U+110000, beyond Unicode
      {"\xf5\x80\x80\x80", 0},  // lead byte never valid
      {"\xff", 0},              // byte never valid
      {"\xe2\x82", 0},          // truncated at the end
      {"ok\xf0\x9f\x98", 2},    // truncated 4-byte sequence
      {"\xe2\x28\xa1", 0},      // second byte not a continuation
      {"\xe2\x82\x28", 0},      // third byte not a continuation
      {"caf\xc3\xa9\xc3", 5},   // valid, then truncated
  };
  for (const auto& [text, offset] : cases) {
    EXPECT_EQ(find_invalid_utf8(text), offset) << testing::PrintToString(text);
  }
}

// --- Request round trips ------------------------------------------------------------------------

TEST(ProtocolRequest, MinimalSingleTextGetsDefaults) {
  const Request request = decode_ok(encode(map(base())));
  EXPECT_EQ(request.id, std::nullopt);
  EXPECT_EQ(request.texts, std::vector<std::string>{"teh speling"});
  EXPECT_FALSE(request.batch_form);
  EXPECT_EQ(request.params, GenerateParams{});
  EXPECT_EQ(request.timeout_ms, std::nullopt);
}

TEST(ProtocolRequest, DefaultMaxNewTokensNeverExceedsTheCap) {
  Limits limits;
  limits.max_new_tokens_cap = 16;
  EXPECT_EQ(decode_ok(encode(map(base())), limits).params.max_new_tokens, 16);
}

TEST(ProtocolRequest, RoundTripsSingleText) {
  Request request;
  request.texts = {"I has a apple"};
  EXPECT_EQ(decode_ok(encode_request(request)), request);
}

TEST(ProtocolRequest, RoundTripsTheModelAndItsVersion) {
  Request request;
  request.texts = {"teh"};
  request.model = "speller-t5";
  EXPECT_EQ(decode_ok(encode_request(request)), request);
  request.version = 2;
  EXPECT_EQ(decode_ok(encode_request(request)), request);
  Request unnamed;
  unnamed.texts = {"teh"};
  EXPECT_FALSE(decode_ok(encode_request(unnamed)).model.has_value());  // the default model
}

TEST(ProtocolRequest, RoundTripsBatchWithEveryField) {
  Request request;
  request.id = "client-7/42";
  request.texts = {"one", "tw\xc3\xb6", "  three  ", "\xf0\x9f\x98\x80 four"};
  request.batch_form = true;
  request.params.max_new_tokens = 256;
  request.params.num_beams = 8;
  request.params.length_penalty = 0.6f;
  request.params.min_new_tokens = 3;
  request.params.return_scores = true;
  request.timeout_ms = 60000;
  EXPECT_EQ(decode_ok(encode_request(request)), request);
}

TEST(ProtocolRequest, RoundTripsEveryGenerationOption) {
  Request request;
  request.texts = {"hello"};
  request.params.num_beams = 4;
  request.params.num_return_sequences = 3;
  request.params.repetition_penalty = 1.3f;
  request.params.no_repeat_ngram_size = 2;
  request.params.stop = {".", "\xc3\xa9nd"};
  EXPECT_EQ(decode_ok(encode_request(request)), request);
  request.params.num_beams = 1;
  request.params.num_return_sequences = 1;
  request.params.do_sample = true;
  request.params.temperature = 0.7f;
  request.params.top_k = 0;
  request.params.top_p = 0.9f;
  request.params.seed = 9007199254740993ULL;  // above 2^53: kept exactly
  EXPECT_EQ(decode_ok(encode_request(request)), request);
  // Left at their defaults, the options are not written: an older server reads the request.
  Request plain;
  plain.texts = {"hello"};
  EXPECT_EQ(encode_request(plain).find("top_k"), std::string::npos);
}

TEST(ProtocolRequest, RoundTripsBatchOfOneAndEdgeValues) {
  Request request;
  request.texts = {"x"};
  request.batch_form = true;  // texts[] of one element stays texts[]
  request.params.max_new_tokens = 1;
  request.params.length_penalty = -2.5f;
  request.timeout_ms = 1;
  EXPECT_EQ(decode_ok(encode_request(request)), request);
  request.id = std::string(256, 'i');
  request.texts = std::vector<std::string>(64, std::string(4096, 'a'));
  EXPECT_EQ(decode_ok(encode_request(request)), request);
}

TEST(ProtocolRequest, AcceptsIntegerLengthPenaltyAndAnyKeyOrder) {
  const std::string bytes =
      encode(map({{"params", map({{"length_penalty", integer(2)}, {"num_beams", integer(4)}})},
                  {"text", str("a")},
                  {"timeout_ms", integer(500)},
                  {"id", str("r1")},
                  {"v", integer(1)}}));
  const Request request = decode_ok(bytes);
  EXPECT_EQ(request.params.length_penalty, 2.0f);
  EXPECT_EQ(request.params.num_beams, 4);
  EXPECT_EQ(request.timeout_ms, 500u);
  EXPECT_EQ(request.id, "r1");
}

TEST(ProtocolRequest, TextsKeepTheirBytes) {
  // No trimming or normalisation: surrounding whitespace is the model's business.
  const Request request = decode_ok(encode(map(with(base(), "text", str(" \tHello  world\n")))));
  EXPECT_EQ(request.texts[0], " \tHello  world\n");
}

}  // namespace
}  // namespace seqpipe::protocol
