// The internal stage protocol: every kind round-trips, each kind takes only its own fields,
// malformed and hostile messages are error values, and random mutations never crash the decoder.
#include "seqpipe/messages/stage_messages.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace seqpipe::stage {
namespace {

using protocol::ErrorCode;

WorkHeader full_header() {
  WorkHeader h;
  h.request = (uint64_t{1} << 40) + 7;
  h.index = 3;
  h.gateway = std::string(
      "gw\0"
      "1",
      4);
  h.deadline = Deadline::at_unix_us(1'700'000'000'000'000);
  h.params.max_new_tokens = 11;
  h.params.num_beams = 4;
  h.params.length_penalty = 1.0f;
  h.params.min_new_tokens = 2;
  h.params.return_scores = true;
  h.params.priority = 3;
  h.timings = {1, 2, 3, 4, 5, 6};
  h.prompt_tokens = 17;
  return h;
}

TextItem full_text() {
  auto w = next_hop<TextItem>(full_header());
  w.batcher = "ipc:///run/b2-in.sock";
  w.text = "teh speling";
  return w;
}

SequenceItem full_sequence() {
  auto w = next_hop<SequenceItem>(full_header());
  w.ids = {12, 0, 31999, 1};
  w.text = "teh speling";
  return w;
}

TensorFrame floats(const std::vector<float>& values) {
  return TensorFrame::floats(values.size(),
                             [&](float* out) { std::copy(values.begin(), values.end(), out); });
}

EncodedItem full_encoded() {
  auto w = next_hop<EncodedItem>(full_header());
  w.hidden = {2, floats({1.5f, -0.0f, 3e-38f, 1e30f})};
  return w;
}

DecodedItem full_decoded() {
  auto w = next_hop<DecodedItem>(full_header());
  w.ids = {0, 12, 1};
  w.score = -0.357759f;
  w.text = "teh speling";
  w.finish_reason = protocol::FinishReason::kEos;
  return w;
}

ResultItem full_result() {
  ResultItem w{(uint64_t{1} << 40) + 7, 3, "the spelling", -0.357759f, {1, 2, 3, 4, 5, 6}, {}};
  w.prompt_tokens = 17;
  w.completion_tokens = (uint32_t{1} << 31) + 3;
  w.finish_reason = protocol::FinishReason::kStop;
  return w;
}

template <class Item>
Item minimal() {
  Item w;
  w.request = 9;
  return w;
}

StageMessage decoded(const std::string& bytes) {
  auto r = decode(bytes);
  if (auto* e = std::get_if<protocol::Error>(&r)) ADD_FAILURE() << e->message;
  return std::holds_alternative<StageMessage>(r) ? std::get<StageMessage>(r) : StageMessage{};
}

// `message` as it travels: its header, then its tensor frames.
StageMessage round_trip(const StageMessage& message) {
  std::vector<TensorFrame> frames;
  append_frames(message, frames);
  auto r = decode(encode(message), frames);
  if (auto* e = std::get_if<protocol::Error>(&r)) ADD_FAILURE() << e->message;
  return std::holds_alternative<StageMessage>(r) ? std::get<StageMessage>(r) : StageMessage{};
}

protocol::Error error_of(const std::string& bytes, const Limits& limits = {},
                         std::span<const TensorFrame> frames = {}) {
  auto r = decode(bytes, frames, limits);
  if (!std::holds_alternative<protocol::Error>(r)) {
    ADD_FAILURE() << "decoded a malformed message";
    return {};
  }
  return std::get<protocol::Error>(r);
}

// One message of every kind, with a full item and a minimal one where it has items.
std::vector<StageMessage> every_kind() {
  return {Ready{32},
          Credit{5},
          Tokenize{{full_text(), minimal<TextItem>()}},
          Sequence{{full_sequence(), minimal<SequenceItem>()}},
          Encode{{full_sequence(), minimal<SequenceItem>()}},
          Encoded{1, {full_encoded(), minimal<EncodedItem>()}},
          Decode{{full_encoded(), minimal<EncodedItem>()}},
          Decoded{4, {full_decoded(), minimal<DecodedItem>()}},
          Postprocess{{full_decoded(), minimal<DecodedItem>()}},
          Result{{full_result(), ResultItem{9, 0, "", 0.0f, {}, {}}}},
          Cancel{{{7, "ipc:///run/gw.sock", Deadline::at_unix_us(1'700'000'000'000'000)},
                  {9, "", Deadline()}}},
          Heartbeat{"ipc:///run/b1-in.sock", 0xfedcba9876543210}};
}

TEST(StageMessages, EveryKindRoundTrips) {
  const auto messages = every_kind();
  ASSERT_EQ(messages.size(), std::variant_size_v<StageMessage>);
  for (size_t k = 0; k < messages.size(); ++k) {
    EXPECT_EQ(static_cast<size_t>(kind(messages[k])), k);
    EXPECT_EQ(round_trip(messages[k]), messages[k]) << kind_name(messages[k]);
  }
  ResultItem failed_item = full_result();
  failed_item.error = protocol::Error{ErrorCode::kTooLong, "texts[0] is 300 tokens, at most 128"};
  const StageMessage with_error = Result{{failed_item}};
  EXPECT_EQ(decoded(encode(with_error)), with_error);
  ResultItem n_best = full_result();
  n_best.alternatives = {"helo", "hallo"};
  n_best.alternative_scores = {-0.75f, -1.5f};
  const StageMessage with_sequences = Result{{n_best}};
  EXPECT_EQ(decoded(encode(with_sequences)), with_sequences);
  EXPECT_EQ(std::get<Ready>(decoded(encode(Ready{32}))).credits, 32);
  DecodedItem beams = full_decoded();
  beams.alternatives = {{0, 5, 1}, {0, 7, 7, 1}};
  beams.alternative_scores = {-0.5f, -1.25f};
  const StageMessage with_alternatives = Decoded{4, {beams}};
  EXPECT_EQ(decoded(encode(with_alternatives)), with_alternatives);
  DecodedItem partial = full_decoded();  // a streamed sequence's ids so far
  partial.stream = true;
  partial.stop_ids = {{5, 6}, {7}};
  partial.partial = true;
  const StageMessage with_partial = Decoded{0, {partial}};
  EXPECT_EQ(decoded(encode(with_partial)), with_partial);
  ResultItem partial_text = full_result();
  partial_text.partial = true;
  const StageMessage with_partial_text = Result{{partial_text}};
  EXPECT_EQ(decoded(encode(with_partial_text)), with_partial_text);
  EXPECT_EQ(decoded(encode(Heartbeat{})), StageMessage(Heartbeat{}));    // a worker's heartbeat
  const StageMessage gateways{Heartbeat{"ipc:///run/gw-results.sock"}};  // a gateway's
  EXPECT_EQ(decoded(encode(gateways)), gateways);
}

TEST(StageMessages, AlternativesAreBounded) {
  DecodedItem w = full_decoded();
  w.alternatives.assign(16, {0, 1});  // one more than beam search can return
  EXPECT_NE(error_of(encode(Decoded{0, {w}}))
                .message.find("alt must be an array of at most 15 id arrays"),
            std::string::npos);
  w.alternatives = {{0, -1}};
  EXPECT_NE(error_of(encode(Decoded{0, {w}})).message.find("alt[0][1] must be a token id"),
            std::string::npos);
  w.alternatives = {{0, 1}, {0, 2, 1}};
  w.alternative_scores = {-1.0f};
  EXPECT_NE(error_of(encode(Decoded{0, {w}}))
                .message.find("alt_s must hold one score per alternative in .alt"),
            std::string::npos);
  w.alternative_scores = {-1.0f, std::nanf("")};
  EXPECT_NE(error_of(encode(Decoded{0, {w}})).message.find("alt_s[1] must be a number, not NaN"),
            std::string::npos);
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
  const std::string good = encode(Sequence{{full_sequence()}});
  EXPECT_NE(error_of("\xc1").message.find("msgpack"), std::string::npos);  // 0xc1 is never used
  EXPECT_NE(error_of(good + "x").message.find("trailing"), std::string::npos);
  EXPECT_NE(error_of(good.substr(0, good.size() / 2)).message.find("msgpack"), std::string::npos);
  EXPECT_NE(error_of("\x90").message.find("not a map"), std::string::npos);  // an empty array
  EXPECT_NE(error_of(patch(good, "\xa4kind\xa8sequence", "\xa4kind\xa8sequencx"))
                .message.find("unknown kind"),
            std::string::npos);
  EXPECT_NE(error_of(patch(good, "\xa1v\x03", "\xa1v\x02")).message.find("v must be"),
            std::string::npos);
  EXPECT_NE(
      error_of(patch(good, "\xa1t\xab", "\xa1y\xab")).message.find("unknown field 'items[0].y'"),
      std::string::npos);
  // Tensor frames: one per encoded item, each within the limit (the decoder checks its size
  // against the rows: a wrong one answers that item alone).
  const std::string encoded = encode(Encoded{0, {full_encoded()}});
  EXPECT_NE(error_of(encoded).message.find("items[0] has no tensor frame"), std::string::npos);
  const TensorFrame frame = floats({1.0f, 2.0f, 3.0f, 4.0f});
  const TensorFrame two[] = {frame, frame};
  EXPECT_NE(error_of(encoded, {}, two).message.find("2 tensor frames for 1 encoded items"),
            std::string::npos);
  EXPECT_NE(error_of(good, {}, std::span(two, 1)).message.find("1 tensor frames for 0"),
            std::string::npos);
  EXPECT_NE(error_of(encoded, Limits{.max_hidden_bytes = 15}, std::span(two, 1))
                .message.find("items[0]: its tensor frame is over the size limit"),
            std::string::npos);
  EXPECT_NE(error_of(patch(encoded, "\xa4rows\x02", "\xa4rows\xff")).message.find("rows must be"),
            std::string::npos);
  EXPECT_NE(error_of(encode(Sequence{{full_sequence(), full_sequence()}}), Limits{.max_items = 1})
                .message.find("items"),
            std::string::npos);
  EXPECT_EQ(error_of(good, Limits{.max_message_bytes = 16}).code, ErrorCode::kTooLong);
  ResultItem nan_score = full_result();  // found by tests/fuzz: NaN never round-trips equal
  nan_score.score = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(error_of(encode(Result{{nan_score}})).message.find("items[0].s"), std::string::npos);
}

TEST(StageMessages, ScoresAreCheckedBeforeTheCastToFloat) {
  ResultItem item = full_result();
  item.score = 0.125f;  // float32 0x3e000000
  const std::string good = encode(Result{{item}});
  // The same score as a float64 beyond float's range: an error, not an undefined conversion.
  const std::string huge = patch(good, std::string("\xa1s\xca\x3e\x00\x00\x00", 7),
                                 std::string("\xa1s\xcb\x7e\x37\xe4\x3c\x88\x00\x75\x9c", 11));
  EXPECT_NE(error_of(huge).message.find("items[0].s must be a number"), std::string::npos);
  // An infinite score is one (a hypothesis of probability zero) and travels.
  item.score = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(decoded(encode(Result{{item}})), StageMessage(Result{{item}}));
}

TEST(StageMessages, EachKindTakesOnlyItsOwnFields) {
  // A message field of another kind: credits on a tokenize, items on a ready.
  const std::string tokenize = encode(Tokenize{{full_text()}});
  const std::string credit_items = patch(encode(Encoded{1, {}}),
                                         "\xa7"
                                         "encoded",
                                         "\xa6"
                                         "credit");
  EXPECT_NE(error_of(credit_items).message.find("a 'credit' message has no field 'items'"),
            std::string::npos);
  const std::string tokenize_credits = patch(encode(Encoded{1, {}}),
                                             "\xa7"
                                             "encoded",
                                             "\xa8"
                                             "tokenize");
  EXPECT_NE(error_of(tokenize_credits).message.find("a 'tokenize' message has no field 'credits'"),
            std::string::npos);
  // An item field of another hop: output ids ("ids", a decoded item's) on a result item; encoder
  // rows on a sequence item.
  const std::string sequence_as_result =
      patch(encode(Sequence{{full_sequence()}}), "\xa8sequence", "\xa6result");
  EXPECT_NE(error_of(sequence_as_result).message.find("unknown field 'items[0]."),
            std::string::npos);
  const std::string decode_as_sequence = patch(encode(Decode{{full_encoded()}}),
                                               "\xa6"
                                               "decode",
                                               "\xa8sequence");
  EXPECT_NE(error_of(decode_as_sequence).message.find("unknown field 'items[0].rows'"),
            std::string::npos);
  EXPECT_TRUE(std::holds_alternative<StageMessage>(decode(tokenize)));
  // A finish reason is one of the protocol's names.
  const std::string odd_reason = patch(encode(Result{{full_result()}}), "\xa4stop", "\xa4halt");
  EXPECT_NE(error_of(odd_reason).message.find("fr must be"), std::string::npos);
}

TEST(StageMessages, ParamsTravelUnderTheClientProtocolKeysAndLimits) {
  const std::string bytes = encode(Sequence{{full_sequence()}});
  for (const char* key : {"max_new_tokens", "num_beams", "length_penalty", "min_new_tokens",
                          "return_scores", "priority"}) {
    EXPECT_NE(bytes.find(key), std::string::npos) << key;
  }
  EXPECT_EQ(bytes.find("mnt"), std::string::npos);
  // The client protocol's checks, under the stage messages' bounds.
  SequenceItem w = full_sequence();
  w.params.min_new_tokens = 12;  // above max_new_tokens 11
  EXPECT_NE(error_of(encode(Sequence{{w}}))
                .message.find("params.min_new_tokens (12) must not exceed params.max_new_tokens"),
            std::string::npos);
}

TEST(StageMessages, EachHopStartsFromTheHeaderOfTheLast) {
  TextItem text = full_text();
  auto sequence = next_hop<SequenceItem>(std::move(text));
  EXPECT_EQ(static_cast<const WorkHeader&>(sequence), full_header());
  EXPECT_TRUE(sequence.ids.empty());
  EXPECT_TRUE(sequence.text.empty());
  const ResultItem f = failed(full_header(), {ErrorCode::kUnavailable, "gone"});
  EXPECT_EQ(f.request, full_header().request);
  EXPECT_EQ(f.index, 3u);
  EXPECT_EQ(f.timings, full_header().timings);
  EXPECT_EQ(f.error, (protocol::Error{ErrorCode::kUnavailable, "gone"}));
}

TEST(StageMessages, EncoderRowsCompareBitForBit) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ((EncoderRows{1, floats({nan, 1.0f})}), (EncoderRows{1, floats({nan, 1.0f})}));
  EXPECT_NE((EncoderRows{1, floats({0.0f, 1.0f})}), (EncoderRows{1, floats({-0.0f, 1.0f})}));
  EXPECT_NE((EncoderRows{1, floats({1.0f})}), (EncoderRows{2, floats({1.0f})}));
  StageMessage with_nan = Decode{{next_hop<EncodedItem>(full_header())}};
  std::get<Decode>(with_nan).items[0].hidden = {1, floats({nan, -nan, 0.0f})};
  EXPECT_EQ(round_trip(with_nan), with_nan);  // a row of NaNs survives the wire
}

TEST(StageMessages, TensorFramesTravelBesideTheHeaderAndAreShared) {
  const StageMessage message = Decode{{full_encoded(), minimal<EncodedItem>()}};
  const std::string header = encode(message);
  // The floats are not in the header (1e30f's bytes would be), only the rows.
  EXPECT_EQ(header.find(std::string("\xca\xf2\x49\x71", 4)), std::string::npos);
  EXPECT_NE(header.find("\xa4rows\x02"), std::string::npos);
  std::vector<TensorFrame> frames;
  append_frames(message, frames);
  ASSERT_EQ(frames.size(), 2u);  // one per item, the empty one too
  EXPECT_EQ(frames[0].bytes().size(), 4 * sizeof(float));
  EXPECT_TRUE(frames[1].bytes().empty());
  // Decoding takes the frames as they are: the item holds the same bytes, not a copy.
  auto r = decode(header, frames);
  ASSERT_TRUE(std::holds_alternative<StageMessage>(r));
  const auto& item = std::get<Decode>(std::get<StageMessage>(r)).items[0];
  EXPECT_EQ(item.hidden.values.bytes().data(), frames[0].bytes().data());
  EXPECT_EQ(item.hidden.values.owner(), frames[0].owner());
}

TEST(StageMessages, HostileHeadersAreRefusedWithoutAllocating) {
  // A real message whose `items` array header (its last byte: an empty fixarray) is replaced by
  // one claiming 2^31 elements, in 5 bytes.
  std::string bytes = encode(Sequence{});
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
  std::mt19937 rng(1234);
  int accepted = 0;
  for (const StageMessage& message :
       {StageMessage(Decode{{full_encoded(), full_encoded()}}),
        StageMessage(Decoded{3, {full_decoded(), full_decoded()}}),
        StageMessage(Tokenize{{full_text()}}), StageMessage(Result{{full_result()}})}) {
    const std::string good = encode(message);
    std::vector<TensorFrame> frames;
    append_frames(message, frames);
    for (int n = 0; n < 5000; ++n) {
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
      auto r = decode(m, frames);
      if (auto* s = std::get_if<StageMessage>(&r)) {
        ++accepted;
        EXPECT_EQ(round_trip(*s), *s) << "an accepted message survives its own round trip";
      } else {
        EXPECT_FALSE(std::get<protocol::Error>(r).message.empty());
      }
    }
  }
  RecordProperty("accepted", accepted);
}

}  // namespace
}  // namespace seqpipe::stage
