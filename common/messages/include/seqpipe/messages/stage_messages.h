#pragma once
// Messages between the pipeline's stages (internal protocol, version 3). Each message kind has
// its own type, and each hop its own item type, holding what that hop needs and nothing more:
//
//   gateway --tokenize{TextItem}--> tokenizer --sequence{SequenceItem}--> batcher
//   batcher --encode{SequenceItem}--> encoder --encoded{EncodedItem}--> batcher
//   batcher --decode{EncodedItem}--> decoder --decoded{DecodedItem}--> batcher
//   batcher --postprocess{DecodedItem}--> postprocessor --result{ResultItem}--> gateway
//
// Every work item starts with a WorkHeader (identity, owning gateway, deadline, parameters,
// timings); a stage makes its output item from its input item's header. Any stage answers an
// item it cannot do with a failed ResultItem straight to the gateway. Internal messages are
// decoded under the same discipline as client ones: size limits before parsing, msgpack unpack
// limits, every field type-checked and only the fields of the message's kind accepted; a
// malformed message is an Error value (logged, counted and dropped by the stage), never a crash.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "seqpipe/messages/clock.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::stage {

constexpr int kVersion = 3;

// Microseconds each stage spent on an item, added up along the way (the reply's timings_us).
struct StageTimings {
  uint64_t queue_us = 0, tokenize_us = 0, batch_wait_us = 0, encode_us = 0, decode_us = 0,
           postprocess_us = 0;
  bool operator==(const StageTimings&) const = default;
};

// What every work item carries from the gateway to its result.
struct WorkHeader {
  uint64_t request = 0;  // the gateway's internal request id
  uint32_t index = 0;    // which text of the request
  std::string gateway;   // the owning gateway's results endpoint: results go back there
  Deadline deadline;     // the request's: past it the gateway has answered deadline_exceeded
  protocol::GenerateParams params;  // as the client sent them (wire keys: docs/PROTOCOL.md)
  StageTimings timings;
  bool stream = false;  // the client asked for partial replies (protocol::Request::stream)
  // params.stop as the tokenizer encodes each alone (no eos): a greedy search whose output ends
  // with one of them stops there (the postprocessor still cuts the text exactly).
  std::vector<std::vector<int32_t>> stop_ids;
  // The input's tokens as the tokenizer made them (eos included): the reply's prompt_tokens.
  // 0 until the tokenizer sets it.
  uint32_t prompt_tokens = 0;
  // The model version that runs the item ("name/version", config::model_key), which the gateway
  // resolved from the request: the hubs give it only to replicas serving that version.
  std::string model;

  bool operator==(const WorkHeader&) const = default;
};

// gateway -> tokenizer: one text of a request.
struct TextItem : WorkHeader {
  // The batcher's ingress endpoint the gateway chose: the tokenizer sends the sequence there
  // (empty: the configured batcher.ingress_endpoint).
  std::string batcher;
  std::string text;

  bool operator==(const TextItem&) const = default;
};

// tokenizer -> batcher -> encoder: the input ids.
struct SequenceItem : WorkHeader {
  std::vector<int32_t> ids;
  // The input text, forwarded for the postprocessor when postprocessor.known_words is set; else
  // empty. It rides along unchanged to the postprocessor.
  std::string text;

  bool operator==(const SequenceItem&) const = default;
};

// Bytes that travel as a frame of their own after a message's msgpack header (an item's hidden
// states), never parsed by the codec: shared and read-only, so passing an item on, or keeping it
// to send again, copies none of them. `owner` keeps them alive (the buffer the encoder wrote, or
// the ZeroMQ frame they arrived in) until the last holder, ZeroMQ's send included, lets go.
class TensorFrame {
 public:
  TensorFrame() = default;
  TensorFrame(std::shared_ptr<const void> owner, std::span<const uint8_t> bytes)
      : owner_(std::move(owner)), bytes_(bytes) {}
  // A frame of `count` float32 values for `fill` to write (once, before the frame is shared).
  template <class Fill>
  static TensorFrame floats(size_t count, Fill fill) {
    std::shared_ptr<float[]> values = std::make_shared_for_overwrite<float[]>(count);
    fill(values.get());
    const auto* bytes = reinterpret_cast<const uint8_t*>(values.get());
    return {std::move(values), {bytes, count * sizeof(float)}};
  }

  std::span<const uint8_t> bytes() const { return bytes_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  // Bit for bit (a NaN equals itself): what a trip through the wire must preserve.
  bool operator==(const TensorFrame& other) const;

 private:
  std::shared_ptr<const void> owner_;
  std::span<const uint8_t> bytes_;
};

// The encoder's output for one sequence: `rows` rows of d_model float32 values, row after row,
// little-endian, in a frame of their own. The codec checks the frame's size against the limits
// only: the decoder, which knows d_model, checks it holds exactly `rows` rows.
struct EncoderRows {
  int64_t rows = 0;
  TensorFrame values;  // rows x d_model float32

  bool operator==(const EncoderRows&) const = default;
};

// encoder -> batcher -> decoder.
struct EncodedItem : WorkHeader {
  EncoderRows hidden;
  std::string text;  // as SequenceItem::text

  bool operator==(const EncodedItem&) const = default;
};

// decoder -> batcher -> postprocessor: the output ids (the decoder start token first).
struct DecodedItem : WorkHeader {
  std::vector<int32_t> ids;
  // Beam search with postprocessor.known_words: the next best hypotheses' ids, best first (at
  // most the engine's max beams - 1), for the postprocessor to choose among.
  std::vector<std::vector<int32_t>> alternatives{};
  float score = 0.0f;  // the HF sequences_score of `ids`
  // One per alternative: its sequences_score (sum of log-probs / length^length_penalty).
  std::vector<float> alternative_scores{};
  std::string text;  // as SequenceItem::text
  // A streamed sequence's ids so far, sent after a decoder step: no credits, never re-sent,
  // and not the item's answer (the final item, partial false, is).
  bool partial = false;
  // Why `ids` ended (the engine's GenerationResult::finish_reason).
  protocol::FinishReason finish_reason = protocol::FinishReason::kLength;

  bool operator==(const DecodedItem&) const = default;
};

// any stage -> gateway: the text of (request, index), or the error that answers the request.
struct ResultItem {
  uint64_t request = 0;
  uint32_t index = 0;
  std::string text;
  float score = 0.0f;
  StageTimings timings;
  std::optional<protocol::Error> error;
  // params.num_return_sequences > 1: the next best beam hypotheses' texts, best first, and
  // their scores.
  std::vector<std::string> alternatives{};
  std::vector<float> alternative_scores{};
  // A streamed text's stable prefix so far (a prefix of the final text); not an answer.
  bool partial = false;
  // An answer's usage (protocol::Usage): the input's and the generated tokens, and why the text
  // ended (kStop also when the postprocessor cut it before a stop sequence).
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  protocol::FinishReason finish_reason = protocol::FinishReason::kLength;

  bool operator==(const ResultItem&) const = default;
};

// A request a gateway cancelled (gateway -> batcher -> decoders), remembered until its deadline.
struct RequestRef {
  uint64_t request = 0;
  std::string gateway;
  Deadline deadline;

  bool operator==(const RequestRef&) const = default;
};

// The messages, one type per kind. Credits: what a worker announces (ready) or gives back.
struct Ready {  // worker -> hub, on connect and reconnect: my capacity is `credits`
  int32_t credits = 0;
  std::string model{};  // the model version this replica serves ("name/version")
  bool operator==(const Ready&) const = default;
};
struct Credit {  // worker -> hub: `credits` more are free
  int32_t credits = 0;
  bool operator==(const Credit&) const = default;
};
struct Tokenize {  // gateway -> tokenizer
  std::vector<TextItem> items;
  bool operator==(const Tokenize&) const = default;
};
struct Sequence {  // tokenizer -> batcher
  std::vector<SequenceItem> items;
  bool operator==(const Sequence&) const = default;
};
struct Encode {  // batcher -> encoder: one batch
  std::vector<SequenceItem> items;
  bool operator==(const Encode&) const = default;
};
struct Encoded {  // encoder -> batcher, with the batch's credit
  int32_t credits = 0;
  std::vector<EncodedItem> items;
  bool operator==(const Encoded&) const = default;
};
struct Decode {  // batcher -> decoder
  std::vector<EncodedItem> items;
  bool operator==(const Decode&) const = default;
};
struct Decoded {  // decoder -> batcher, with the slots freed (finished, expired or cancelled)
  int32_t credits = 0;
  std::vector<DecodedItem> items;
  bool operator==(const Decoded&) const = default;
};
struct Postprocess {  // batcher -> postprocessor
  std::vector<DecodedItem> items;
  bool operator==(const Postprocess&) const = default;
};
struct Result {  // any stage -> gateway
  std::vector<ResultItem> items;
  bool operator==(const Result&) const = default;
};
struct Cancel {  // gateway -> batcher -> decoder: drop the work of these requests
  std::vector<RequestRef> requests;
  bool operator==(const Cancel&) const = default;
};
// Both ways between a hub and each worker every heartbeat interval (Paranoid Pirate; `from`
// empty), and between gateways and batchers (`from`: the gateway's results endpoint, or the
// batcher's ingress endpoint).
struct Heartbeat {
  std::string from;
  // A batcher's, to its gateways: a number drawn at its start (never 0). A new one means the
  // batcher restarted and lost what it held.
  uint64_t incarnation = 0;
  bool operator==(const Heartbeat&) const = default;
};

// The alternatives in MessageKind order.
using StageMessage = std::variant<Ready, Credit, Tokenize, Sequence, Encode, Encoded, Decode,
                                  Decoded, Postprocess, Result, Cancel, Heartbeat>;

enum class MessageKind {
  kReady,
  kCredit,
  kTokenize,
  kSequence,
  kEncode,
  kEncoded,
  kDecode,
  kDecoded,
  kPostprocess,
  kResult,
  kCancel,
  kHeartbeat,
};
inline MessageKind kind(const StageMessage& message) {
  return static_cast<MessageKind>(message.index());
}
std::string_view kind_name(MessageKind kind);
inline std::string_view kind_name(const StageMessage& message) {
  return kind_name(kind(message));
}

// The item of the next hop, starting from `item`'s header (identity, deadline, parameters and
// the timings so far).
template <class Next>
Next next_hop(WorkHeader&& item) {
  Next next;
  static_cast<WorkHeader&>(next) = std::move(item);
  return next;
}

// A failed result for `item`: the request is answered with `error`.
ResultItem failed(const WorkHeader& item, protocol::Error error);

struct Limits {
  size_t max_message_bytes = 64 << 20;
  size_t max_items = 4096;
  size_t max_ids = 8192;  // per item
  size_t max_text_bytes = 1 << 20;
  size_t max_hidden_bytes = 32 << 20;  // per item
};

// A message travels as one multipart message: its msgpack header (encode), then its tensor
// frames (append_frames): one per EncodedItem, its hidden rows, in item order; the other kinds
// have none. decode() takes the header and the frames that followed it; a message whose frames do
// not number its EncodedItems, or one over limits.max_hidden_bytes, is an Error.
std::string encode(const StageMessage& message);
void append_frames(const StageMessage& message, std::vector<TensorFrame>& frames);
std::variant<StageMessage, protocol::Error> decode(std::span<const uint8_t> header,
                                                   std::span<const TensorFrame> frames,
                                                   const Limits& limits = {});
inline std::variant<StageMessage, protocol::Error> decode(std::string_view header,
                                                          std::span<const TensorFrame> frames,
                                                          const Limits& limits = {}) {
  return decode(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(header.data()), header.size()),
      frames, limits);
}
// A message without tensor frames (every kind but encoded and decode, or those without items).
inline std::variant<StageMessage, protocol::Error> decode(std::string_view header,
                                                          const Limits& limits = {}) {
  return decode(header, {}, limits);
}
inline std::variant<StageMessage, protocol::Error> decode(std::span<const uint8_t> header,
                                                          const Limits& limits = {}) {
  return decode(header, {}, limits);
}

}  // namespace seqpipe::stage
