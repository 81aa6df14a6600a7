// The client wire protocol (common/protocol/include/seqpipe/protocol/protocol.h, docs/PROTOCOL.md):
// round trips, every malformed request answered with the right code and a message naming the
// field, hostile frames refused by limits, and a bounded random-mutation run.
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

namespace seqpipe::protocol {
namespace {

using ::testing::HasSubstr;

std::span<const uint8_t> as_bytes(const std::string& bytes) {
  return {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
}

// --- Building arbitrary msgpack (valid or not for the protocol) ------------------------------

using Packer = msgpack::packer<msgpack::sbuffer>;
using Value = std::function<void(Packer&)>;
using Fields = std::vector<std::pair<std::string, Value>>;

Value str(std::string s) {
  return [s](Packer& p) { p.pack(s); };
}
Value integer(int64_t v) {
  return [v](Packer& p) { p.pack(v); };
}
Value uinteger(uint64_t v) {
  return [v](Packer& p) { p.pack(v); };
}
// Always a msgpack float64: msgpack-c's pack_double writes whole numbers (5.0) as integers, and
// these tests need the float a Python client would send.
Value real(double v) {
  return [v](Packer& p) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    std::string bytes(1, '\xcb');
    for (int shift = 56; shift >= 0; shift -= 8) bytes += static_cast<char>(bits >> shift);
    p.pack_str_body(bytes.data(), static_cast<uint32_t>(bytes.size()));
  };
}
Value boolean(bool v) {
  return [v](Packer& p) { p.pack(v); };
}
Value nil() {
  return [](Packer& p) { p.pack_nil(); };
}
Value binary(std::string s) {
  return [s](Packer& p) {
    p.pack_bin(static_cast<uint32_t>(s.size()));
    p.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
  };
}
Value array(std::vector<Value> elements) {
  return [elements](Packer& p) {
    p.pack_array(static_cast<uint32_t>(elements.size()));
    for (const Value& element : elements) element(p);
  };
}
Value map(Fields fields) {
  return [fields](Packer& p) {
    p.pack_map(static_cast<uint32_t>(fields.size()));
    for (const auto& [key, value] : fields) {
      p.pack(key);
      value(p);
    }
  };
}
// Raw bytes spliced in as one value (for hostile headers).
Value raw(std::string bytes) {
  return [bytes](Packer& p) {
    // The packer's buffer is reachable only through write(); pack_*_body writes verbatim.
    p.pack_str_body(bytes.data(), static_cast<uint32_t>(bytes.size()));
  };
}

std::string encode(const Value& value) {
  msgpack::sbuffer buffer;
  Packer packer(buffer);
  value(packer);
  return std::string(buffer.data(), buffer.size());
}

// The smallest valid request, to be varied one field at a time.
Fields base() {
  return {{"v", integer(1)}, {"text", str("teh speling")}};
}

Fields with(Fields fields, const std::string& key, Value value) {
  for (auto& field : fields) {
    if (field.first == key) {
      field.second = std::move(value);
      return fields;
    }
  }
  fields.emplace_back(key, std::move(value));
  return fields;
}

Fields without(Fields fields, const std::string& key) {
  std::erase_if(fields, [&](const auto& field) { return field.first == key; });
  return fields;
}

Fields with_params(Fields params) {
  return with(base(), "params", map(std::move(params)));
}

std::variant<Request, RejectedRequest> decode(const std::string& bytes, const Limits& limits = {}) {
  return decode_request(as_bytes(bytes), limits);
}

Request decode_ok(const std::string& bytes, const Limits& limits = {}) {
  auto result = decode(bytes, limits);
  if (auto* rejected = std::get_if<RejectedRequest>(&result)) {
    ADD_FAILURE() << "rejected: " << wire_name(rejected->error.code) << ": "
                  << rejected->error.message;
    return {};
  }
  return std::get<Request>(result);
}

RejectedRequest decode_rejected(const std::string& bytes, const Limits& limits = {}) {
  auto result = decode(bytes, limits);
  if (std::holds_alternative<Request>(result)) {
    ADD_FAILURE() << "accepted a request that should be rejected";
    return {};
  }
  return std::get<RejectedRequest>(result);
}

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

std::string nested_arrays(int depth) {
  std::string bytes(static_cast<size_t>(depth), '\x91');  // fixarray of one element
  return bytes + '\xc0';                                  // nil at the bottom
}

std::vector<BadRequest> bad_requests() {
  const ErrorCode kInvalid = ErrorCode::kInvalidArgument;
  const ErrorCode kTooLong = ErrorCode::kTooLong;
  const std::string valid = encode(map(base()));
  const std::string big_text(4097, 'a');
  std::vector<Value> too_many_texts(65, str("t"));
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
      // Generation options.
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
      // Hostile frames: refused by the unpacking limits, without crashing or allocating much.
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
