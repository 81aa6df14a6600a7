#pragma once
// The client wire protocol, version 1: one msgpack map per request and per reply
// (docs/PROTOCOL.md). Pure functions over byte buffers, no sockets: the gateway decodes requests
// and encodes replies, clients and tests do the reverse. Decoding never throws and never trusts the
// peer: every problem is an Error value naming the field at fault, and msgpack is unpacked under
// limits so that a hostile frame cannot make the decoder allocate much more than the frame itself.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "seqpipe/generation/finish_reason.h"
#include "seqpipe/generation/limits.h"
#include "seqpipe/generation/search_options.h"

namespace seqpipe::protocol {

// Every request and reply carries `v`. A server rejects any other value; bump it only for an
// incompatible change (see "Versioning" in docs/PROTOCOL.md).
constexpr int kVersion = 1;

// Bounds of a request's `model` (bytes of its name) and `version`; a model repository's names and
// version directories keep within them.
inline constexpr size_t kMaxModelNameBytes = 128;
inline constexpr int64_t kMaxModelVersion = 1'000'000;

// Stable wire error codes. wire_name() and parse_error_code() are the one place they meet their
// strings; other modules map their own statuses to these codes, never to strings.
enum class ErrorCode {
  kInvalidArgument,  // the request is malformed or out of range; do not retry it unchanged
  kTooLong,          // input larger than a limit (bytes, number of texts, tokens); split/shorten it
  kDeadlineExceeded,  // timeout_ms (or the server's default deadline) passed before the reply
  kOverloaded,        // the server shed this request; retry later with backoff
  kInternal,          // a bug or an engine failure on the server
  kUnavailable,       // a pipeline stage is down or restarting; retry later
  kCancelled,         // the client cancelled the request (op "cancel"); the work was dropped
  kNotFound,          // the request names a model (or a version of it) the server does not serve
};

std::string_view wire_name(ErrorCode code);
// Whether the client caused it (a malformed, too long or cancelled request, or an unknown
// model: HTTP 4xx but 429), not the server: `seqpipe status` counts the two apart.
bool is_client_error(ErrorCode code);
// nullopt for a string that is not a v1 code (clients treat such codes like kInternal).
std::optional<ErrorCode> parse_error_code(std::string_view name);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;  // human-readable, names the field at fault ("params.num_beams must ...")

  bool operator==(const Error&) const = default;
};

// What a request asks for: the search's options (generation::SearchOptions, which the engine
// takes as they are; ranges in the option table, generate_options.h) and the serving layers'.
// Configured limits bound some: max_new_tokens to Limits::max_new_tokens_cap (not given: the
// engine's default, or the cap if that is lower), num_beams to Limits::max_beams.
struct GenerateParams : generation::SearchOptions {
  // Scheduling priority, 1 = highest .. Limits::priority_levels (as Triton's dynamic batcher);
  // 0 = not given: the batcher's default level (batcher.default_priority_level). It orders the
  // batcher's queue and never changes the output (the response cache ignores it).
  int priority = 0;
  // Each text is cut before the first of these (non-empty, at most
  // generation::kMaxStopSequences of at most generation::kMaxStopBytes UTF-8 bytes).
  std::vector<std::string> stop{};

  bool operator==(const GenerateParams&) const = default;
};

// Whether the same params and text always give the same reply (what the response cache may
// keep): not when sampling without a seed.
inline bool deterministic(const GenerateParams& params) {
  return !params.do_sample || params.seed.has_value();
}

// What a request asks for (the `op` field; absent means generate).
enum class Op {
  kGenerate,  // texts in, corrected texts out (the reply)
  kCancel,    // cancel this client's in-flight request `id`: it is answered `cancelled` once, or
              // nothing happens when it has been answered already. A cancel gets no reply of its
              // own unless it is malformed.
};

struct Request {
  Op op = Op::kGenerate;
  std::optional<std::string>
      id;  // echoed in the reply; absent: the reply's id is ""; required by kCancel
  std::vector<std::string> texts;  // one element for the single-text form; empty for kCancel
  bool batch_form = false;         // the client sent texts[] (the reply then carries texts[])
  GenerateParams params;
  std::optional<uint32_t> timeout_ms;  // absent: the server's default deadline
  // Partial replies as tokens are decoded, then the final one (docs/PROTOCOL.md, "Streaming").
  // Only with `text`, num_beams 1 and num_return_sequences 1.
  bool stream = false;
  // The model (a name of the server's model repository) and its version to run; absent: the
  // server's default model, and a named model's highest version. Unknown: `not_found`.
  std::optional<std::string> model;
  std::optional<uint32_t> version;

  bool operator==(const Request&) const = default;
};

// What a request may weigh. The gateway fills these from config/pipeline.yaml (the config keys
// are listed under "Limits" in docs/PROTOCOL.md); the gateway.* keys default to these (their one
// definition). The token cap's default here serves tests and clients; the served cap is
// decoder.max_new_tokens.
struct Limits {
  size_t max_message_bytes = 1 << 20;  // whole msgpack frame; larger -> too_long before unpacking
  size_t max_texts = 64;               // elements of texts[]; more -> too_long
  size_t max_text_bytes = 4096;        // UTF-8 bytes of one text; more -> too_long
  size_t max_id_bytes = 256;           // bytes of id; more -> invalid_argument
  int max_new_tokens_cap = 256;        // largest params.max_new_tokens accepted
  int max_beams = 8;                   // largest params.num_beams accepted
  uint32_t max_timeout_ms = 60000;     // largest timeout_ms accepted
  int priority_levels = 1;             // params.priority accepted in [1, priority_levels]
};

// A request that failed to decode, with what the gateway needs to answer it.
struct RejectedRequest {
  Error error;
  // The request's id when it could be read (a valid id field in a readable map), else "". A client
  // pipelining requests on one DEALER matches the error reply to its request by this id.
  std::string id;
};

// Never throws. Checks the size, unpacks under limits derived from `limits`, then validates every
// field (docs/PROTOCOL.md lists the rules and which code each violation gets).
std::variant<Request, RejectedRequest> decode_request(std::span<const uint8_t> bytes,
                                                      const Limits& limits);

// For clients and tests. Writes every params field (priority only when not 0); `id` and
// `timeout_ms` only when set; `text`
// (texts[0]) unless batch_form. A kCancel request is {v, op: "cancel", id} and nothing else.
// For a valid request r, decode_request(encode_request(r)) == r.
std::string encode_request(const Request& request);

// Microseconds spent in each stage; total is the gateway's receive-to-send time.
struct Timings {
  uint64_t queue_us = 0;
  uint64_t tokenize_us = 0;
  uint64_t batch_wait_us = 0;
  uint64_t encode_us = 0;
  uint64_t decode_us = 0;
  uint64_t postprocess_us = 0;
  uint64_t total_us = 0;

  bool operator==(const Timings&) const = default;
};

// Why a text ended, as the engine says (generation/finish_reason.h). wire_name() and
// parse_finish_reason() are the one place it meets the client protocol's strings ("eos",
// "length", "stop"); the OpenAI and TGI front doors map it to their names in theirs.
using generation::FinishReason;
std::string_view wire_name(FinishReason reason);
// nullopt for a string that is not a v1 reason (clients read such reasons as kStop).
std::optional<FinishReason> parse_finish_reason(std::string_view name);

// What one text of a reply took and why it ended (the model's best hypothesis, before the
// postprocessor's word choices; kStop also when the text was cut before a stop sequence).
struct Usage {
  uint32_t prompt_tokens = 0;      // the input's tokens as the tokenizer made them, eos included
  uint32_t completion_tokens = 0;  // tokens generated, eos included (the start token is not)
  FinishReason finish_reason = FinishReason::kEos;

  bool operator==(const Usage&) const = default;
};

// One beam hypothesis of a text: its output and its score (sum of token log-probs /
// length^length_penalty, HF's sequences_scores).
struct Sequence {
  std::string text;
  float score = 0.0f;

  bool operator==(const Sequence&) const = default;
};

struct Reply {
  std::string id;
  bool ok = true;
  // A streamed request's partial reply {v, id, status: "partial", text}: texts[0] is the text
  // decoded since the previous partial. The request stays pending until a reply that is not
  // partial.
  bool partial = false;
  bool batch_form = false;         // ok replies: texts[] on the wire, else text (= texts[0])
  std::vector<std::string> texts;  // ok replies only
  std::optional<std::vector<float>> scores;  // ok replies that asked return_scores: one per text
  // Ok replies that asked num_return_sequences > 1: per text, that many beam hypotheses (best
  // first, the first being the text) with their scores.
  std::optional<std::vector<std::vector<Sequence>>> sequences;
  // Ok replies: one per text (empty from a server older than this field). A text split into
  // pieces (gateway.split_words) sums its pieces' tokens and ends as its most telling piece:
  // length, else stop, else eos.
  std::vector<Usage> usage;
  std::optional<Error> error;  // error replies only
  Timings timings;

  bool operator==(const Reply&) const = default;
};

// An error reply. Error replies carry neither text nor texts, so the request's form does not
// matter.
Reply error_reply(std::string id, Error error);
inline Reply error_reply(RejectedRequest rejected) {
  return error_reply(std::move(rejected.id), std::move(rejected.error));
}

// Ok replies: {v, id, status: "ok", text | texts, scores?, sequences?, usage?, timings_us}.
// Partial replies: {v, id, status: "partial", text}.
// Error replies: {v, id, status: "error", error: {code, message}, timings_us}.
std::string encode_reply(const Reply& reply);

// For clients. Never throws. Unknown fields are ignored and an unknown error code reads as
// kInternal (both may appear within v1). The Error alternative means the bytes are not a v1 reply;
// a well-formed error reply is a Reply with ok == false.
std::variant<Reply, Error> decode_reply(std::span<const uint8_t> bytes);

// Byte offset of the first ill-formed sequence in `text`, or nullopt when it is valid UTF-8.
// Strict (Unicode Table 3-7): rejects overlong forms, surrogates, code points above U+10FFFF,
// stray continuation bytes and truncated sequences.
std::optional<size_t> find_invalid_utf8(std::string_view text);

}  // namespace seqpipe::protocol
