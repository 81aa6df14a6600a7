#include "seqpipe/protocol/protocol.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <msgpack.hpp>

#include "codec.h"
#include "seqpipe/protocol/msgpack_io.h"
#include "seqpipe/protocol/request_reader.h"

namespace seqpipe::protocol {
namespace {

using codec::invalid;
using codec::kMaxNesting;
using codec::too_long;
using codec::unpack_one;
using codec::write_texts;
using msgpack_io::as_string_view;
using msgpack_io::describe;
using msgpack_io::NamedSlot;
using msgpack_io::quote_name;
using msgpack_io::read_int;

// --- Unpacking limits -----------------------------------------------------------------------
// msgpack-c builds an object tree, and for an array or map it allocates the element storage
// (24 bytes per array element, 48 per map entry) as soon as it reads the declared length, before
// any element arrives. Without limits a 5-byte header claiming 2^31 elements asks for 48 GiB.
// With them the memory allocated ahead of the data stays below
// kMaxNesting * (array limit * 24 + kMaxMapEntries * 48) bytes (about 220 KiB by default); the
// rest of the tree is bounded by the frame itself (every element takes at least one byte).

// A request map has 7 known keys and params 15: a bigger map has unknown or duplicate keys
// anyway.
constexpr size_t kMaxMapEntries = 64;
// The only array in a request is texts[]. Up to this length (or max_texts if larger) a long
// texts[] is reported by name ("texts has 300 elements, at most 64").
constexpr size_t kMinArrayLimit = 1024;

// The Unicode White_Space property: a text made only of these has nothing to correct.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
         c == 0x3000;
}

// `text` must be valid UTF-8 (checked first by find_invalid_utf8).
bool is_blank(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t length = lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
    char32_t code_point = length == 1   ? lead
                          : length == 2 ? lead & 0x1f
                          : length == 3 ? lead & 0x0f
                                        : lead & 0x07;
    for (size_t k = 1; k < length; ++k) {
      code_point = (code_point << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
    }
    if (!is_white_space(code_point)) return false;
    i += length;
  }
  return true;
}

std::optional<Error> check_text(std::string_view text, const std::string& path,
                                const Limits& limits) {
  if (text.size() > limits.max_text_bytes) {
    return too_long(path + " is " + std::to_string(text.size()) + " bytes, at most " +
                    std::to_string(limits.max_text_bytes));
  }
  if (auto bad = find_invalid_utf8(text)) {
    return invalid(path + " is not valid UTF-8 (byte " + std::to_string(*bad) + ")");
  }
  if (text.empty()) return invalid(path + " is empty");
  if (is_blank(text)) return invalid(path + " is only whitespace");
  return std::nullopt;
}

std::optional<Error> read_text(const msgpack::object& value, const std::string& path,
                               const Limits& limits, std::string& out) {
  if (value.type != msgpack::type::STR) {
    return invalid(path + " must be a string, got " + describe(value));
  }
  const std::string_view text = as_string_view(value);
  if (auto error = check_text(text, path, limits)) return error;
  out.assign(text);
  return std::nullopt;
}

std::optional<Error> read_id(const msgpack::object& value, const Limits& limits, std::string& out) {
  // Strings only: an integer id would come back as a string, and a client comparing ids would
  // silently never match its reply.
  if (value.type != msgpack::type::STR) {
    return invalid("id must be a string, got " + describe(value));
  }
  const std::string_view id = as_string_view(value);
  if (id.empty()) return invalid("id must not be empty (omit it instead)");
  if (id.size() > limits.max_id_bytes) {
    return invalid("id is " + std::to_string(id.size()) + " bytes, at most " +
                   std::to_string(limits.max_id_bytes));
  }
  if (auto bad = find_invalid_utf8(id)) {
    return invalid("id is not valid UTF-8 (byte " + std::to_string(*bad) + ")");
  }
  out.assign(id);
  return std::nullopt;
}

std::optional<Error> read_texts(const msgpack::object& value, const Limits& limits,
                                std::vector<std::string>& out) {
  if (value.type != msgpack::type::ARRAY) {
    return invalid("texts must be an array of strings, got " + describe(value));
  }
  const msgpack::object_array& array = value.via.array;
  if (array.size == 0) return invalid("texts must not be empty");
  if (array.size > limits.max_texts) {
    return too_long("texts has " + std::to_string(array.size) + " elements, at most " +
                    std::to_string(limits.max_texts));
  }
  out.resize(array.size);
  for (uint32_t i = 0; i < array.size; ++i) {
    const std::string path = "texts[" + std::to_string(i) + "]";
    if (auto error = read_text(array.ptr[i], path, limits, out[i])) return error;
  }
  return std::nullopt;
}

// The fields a request map may hold; null where absent.
struct RequestFields {
  const msgpack::object* v = nullptr;
  const msgpack::object* id = nullptr;
  const msgpack::object* text = nullptr;
  const msgpack::object* texts = nullptr;
  const msgpack::object* params = nullptr;
  const msgpack::object* timeout_ms = nullptr;
  const msgpack::object* op = nullptr;
  const msgpack::object* stream = nullptr;
  const msgpack::object* model = nullptr;
  const msgpack::object* version = nullptr;
};

// `op` and, for a cancel, that it names the request to cancel by its id and carries nothing else.
std::optional<Error> read_op(const RequestFields& f, Request& request) {
  if (f.op) {
    if (f.op->type != msgpack::type::STR)
      return invalid("op must be \"generate\" or \"cancel\", got " + describe(*f.op));
    const std::string_view name = as_string_view(*f.op);
    if (name == "cancel") {
      request.op = Op::kCancel;
    } else if (name != "generate") {
      return invalid("op must be \"generate\" or \"cancel\", got " + quote_name(name));
    }
  }
  if (request.op != Op::kCancel) return std::nullopt;
  if (!request.id) return invalid("a cancel request needs the id of the request to cancel");
  for (const auto& [name, field] :
       {std::pair{"text", f.text}, std::pair{"texts", f.texts}, std::pair{"params", f.params},
        std::pair{"timeout_ms", f.timeout_ms}, std::pair{"stream", f.stream},
        std::pair{"model", f.model}, std::pair{"version", f.version}}) {
    if (field)
      return invalid(std::string("a cancel request carries only v, op and id, not '") + name + "'");
  }
  return std::nullopt;
}

// `model` and `version`: which model runs the request (the gateway resolves the name).
std::optional<Error> read_model(const RequestFields& f, Request& request) {
  if (f.model) {
    if (f.model->type != msgpack::type::STR)
      return invalid("model must be a string, got " + describe(*f.model));
    const std::string_view name = as_string_view(*f.model);
    if (name.empty() || name.size() > kMaxModelNameBytes)
      return invalid("model must be 1 to " + std::to_string(kMaxModelNameBytes) + " bytes");
    request.model = std::string(name);
  }
  if (f.version) {
    int64_t value = 0;
    if (auto error = read_int(*f.version, "version", 1, kMaxModelVersion, value)) return error;
    request.version = static_cast<uint32_t>(value);
  }
  return std::nullopt;
}

// A generate request's text or texts, params, timeout_ms, stream, model and version.
std::optional<Error> read_generate(const RequestFields& f, const Limits& limits, Request& request) {
  if (f.text && f.texts) return invalid("request has both 'text' and 'texts' (send exactly one)");
  if (!f.text && !f.texts) return invalid("missing field 'text' (or 'texts')");
  if (f.text) {
    request.texts.resize(1);
    if (auto error = read_text(*f.text, "text", limits, request.texts[0])) return error;
  } else {
    request.batch_form = true;
    if (auto error = read_texts(*f.texts, limits, request.texts)) return error;
  }
  // An omitted max_new_tokens never exceeds the server's cap (a config may set it below the
  // default).
  request.params.max_new_tokens =
      std::min(request.params.max_new_tokens, limits.max_new_tokens_cap);
  if (f.params) {
    const msgpack_io::ParamBounds bounds{limits.max_new_tokens_cap, limits.max_beams,
                                         limits.priority_levels};
    if (auto error = msgpack_io::read_params(*f.params, bounds, request.params)) return error;
  }
  if (auto error = read_model(f, request)) return error;
  if (f.timeout_ms) {
    int64_t value = 0;
    if (auto error = read_int(*f.timeout_ms, "timeout_ms", 1, limits.max_timeout_ms, value))
      return error;
    request.timeout_ms = static_cast<uint32_t>(value);
  }
  if (f.stream) {
    if (f.stream->type != msgpack::type::BOOLEAN)
      return invalid("stream must be a boolean, got " + describe(*f.stream));
    request.stream = f.stream->via.boolean;
  }
  if (request.stream) {
    // A partial reply carries one text growing at its end: one text, one hypothesis.
    if (request.batch_form)
      return invalid("stream needs the single-text form ('text', not 'texts')");
    if (request.params.num_beams != 1 || request.params.num_return_sequences != 1)
      return invalid(
          "stream needs params.num_beams 1 and params.num_return_sequences 1 "
          "(a beam search's best text is known only at its end)");
  }
  return std::nullopt;
}

// Finds the top-level "id" of a msgpack map without building the document: msgpack-c's
// event parser keeps its own stack (no recursion), so it reads what the limits refused to unpack.
struct IdFinder : msgpack::null_visitor {
  bool start_map(uint32_t) { return ++depth, true; }
  bool end_map() { return --depth, true; }
  bool start_array(uint32_t) { return ++depth, true; }
  bool end_array() { return --depth, true; }
  bool start_map_key() { return in_key = depth == 1, true; }
  bool end_map_key() { return in_key = false, true; }
  bool visit_str(const char* v, uint32_t size) {
    const std::string_view text(v, size);
    if (in_key) {
      id_next = text == "id";
    } else if (id_next && depth == 1) {
      id.assign(text);
      return false;  // found: stop reading
    }
    return true;
  }
  bool start_map_value() { return depth == 1 || (id_next = false, true); }
  bool end_map_value() {
    if (depth == 1) id_next = false;
    return true;
  }
  size_t depth = 0;
  bool in_key = false, id_next = false;
  std::string id;
};

// The id of a request refused before it was unpacked, when one can be read: its reply then
// reaches the client waiting for it by id. "" when none is readable or it is not a valid id.
std::string readable_id(std::span<const uint8_t> bytes, const Limits& limits) {
  try {
    IdFinder finder;
    msgpack::parse(reinterpret_cast<const char*>(bytes.data()), bytes.size(), finder);
    if (finder.id.empty() || finder.id.size() > limits.max_id_bytes || find_invalid_utf8(finder.id))
      return "";
    return finder.id;
  } catch (const std::exception&) {
    return "";
  }
}

std::variant<Request, RejectedRequest> read_request_or_throw(const msgpack::object& root,
                                                             const Limits& limits);

std::variant<Request, RejectedRequest> decode_request_or_throw(std::span<const uint8_t> bytes,
                                                               const Limits& limits) {
  auto reject = [](Error error, std::string id = {}) {
    return RejectedRequest{std::move(error), std::move(id)};
  };
  // Size first: an oversize frame is refused before any parsing work.
  if (bytes.size() > limits.max_message_bytes) {
    return reject(too_long("message is " + std::to_string(bytes.size()) + " bytes, at most " +
                           std::to_string(limits.max_message_bytes)),
                  readable_id(bytes, limits));
  }
  if (bytes.empty()) return reject(invalid("message is empty (expected a msgpack map)"));

  const msgpack::unpack_limit limit(std::max(limits.max_texts, kMinArrayLimit), kMaxMapEntries,
                                    bytes.size(), bytes.size(), bytes.size(), kMaxNesting);
  msgpack::object_handle handle;
  if (auto error = unpack_one(bytes, limit, handle)) {
    // The only array a request has is texts[].
    if (error->code == ErrorCode::kTooLong) {
      error->message += " (texts may hold at most " + std::to_string(limits.max_texts) + ")";
    }
    return reject(std::move(*error), readable_id(bytes, limits));
  }
  return read_request_or_throw(handle.get(), limits);
}

std::variant<Request, RejectedRequest> read_request_or_throw(const msgpack::object& root,
                                                             const Limits& limits) {
  auto reject = [](Error error, std::string id = {}) {
    return RejectedRequest{std::move(error), std::move(id)};
  };
  if (root.type != msgpack::type::MAP) {
    return reject(invalid("request must be a msgpack map, got " + describe(root)));
  }

  RequestFields f;
  const NamedSlot fields[] = {
      {"v", &f.v},         {"stream", &f.stream},  {"id", &f.id}, {"text", &f.text},
      {"texts", &f.texts}, {"params", &f.params},  {"op", &f.op}, {"timeout_ms", &f.timeout_ms},
      {"model", &f.model}, {"version", &f.version}};
  std::optional<std::string> unknown;
  if (auto error = msgpack_io::collect_fields(root.via.map, "", fields, unknown)) {
    return reject(std::move(*error));
  }

  // The id is read first so that every later error reply can carry it; its own error is reported
  // in turn below, after the version.
  Request request;
  std::optional<Error> id_error;
  if (f.id) {
    std::string value;
    id_error = read_id(*f.id, limits, value);
    if (!id_error) request.id = std::move(value);
  }
  const std::string echo_id = request.id.value_or("");

  // The version before the other fields: a v2 request is told about the version, not about
  // fields this server does not know.
  if (!f.v) return reject(invalid("missing field 'v' (the protocol version, 1)"), echo_id);
  int64_t version = 0;
  if (read_int(*f.v, "v", kVersion, kVersion, version)) {
    return reject(invalid("v must be " + std::to_string(kVersion) +
                          " (the protocol version), got " + describe(*f.v)),
                  echo_id);
  }
  if (unknown) return reject(invalid("unknown field " + *unknown), echo_id);
  if (id_error) return reject(std::move(*id_error));
  if (auto error = read_op(f, request)) return reject(std::move(*error), echo_id);
  if (request.op == Op::kCancel) return request;
  if (auto error = read_generate(f, limits, request)) return reject(std::move(*error), echo_id);
  return request;
}

}  // namespace

bool is_client_error(ErrorCode code) {
  return code == ErrorCode::kInvalidArgument || code == ErrorCode::kTooLong ||
         code == ErrorCode::kNotFound || code == ErrorCode::kCancelled;
}

std::string_view wire_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kTooLong:
      return "too_long";
    case ErrorCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case ErrorCode::kOverloaded:
      return "overloaded";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kNotFound:
      return "not_found";
  }
  return "internal";
}

std::optional<ErrorCode> parse_error_code(std::string_view name) {
  for (ErrorCode code : {ErrorCode::kInvalidArgument, ErrorCode::kTooLong,
                         ErrorCode::kDeadlineExceeded, ErrorCode::kOverloaded, ErrorCode::kInternal,
                         ErrorCode::kUnavailable, ErrorCode::kCancelled, ErrorCode::kNotFound}) {
    if (wire_name(code) == name) return code;
  }
  return std::nullopt;
}

std::string_view wire_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
  }
  return "stop";
}

std::optional<FinishReason> parse_finish_reason(std::string_view name) {
  for (FinishReason reason : {FinishReason::kEos, FinishReason::kLength, FinishReason::kStop}) {
    if (wire_name(reason) == name) return reason;
  }
  return std::nullopt;
}

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  size_t i = 0;
  while (i < size) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // Unicode Table 3-7: the lead byte fixes the length and the range of the second byte; the
    // narrowed ranges exclude overlong forms (E0, F0), surrogates (ED) and > U+10FFFF (F4).
    size_t length = 0;
    unsigned char second_lo = 0x80, second_hi = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead == 0xe0) {
      length = 3, second_lo = 0xa0;
    } else if ((lead >= 0xe1 && lead <= 0xec) || lead == 0xee || lead == 0xef) {
      length = 3;
    } else if (lead == 0xed) {
      length = 3, second_hi = 0x9f;
    } else if (lead == 0xf0) {
      length = 4, second_lo = 0x90;
    } else if (lead >= 0xf1 && lead <= 0xf3) {
      length = 4;
    } else if (lead == 0xf4) {
      length = 4, second_hi = 0x8f;
    } else {
      return i;  // a stray continuation byte, C0/C1 (always overlong) or F5..FF
    }
    if (size - i < length) return i;  // truncated at the end
    if (bytes[i + 1] < second_lo || bytes[i + 1] > second_hi) return i;
    for (size_t k = 2; k < length; ++k) {
      if ((bytes[i + k] & 0xc0) != 0x80) return i;
    }
    i += length;
  }
  return std::nullopt;
}

std::variant<Request, RejectedRequest> decode_request(std::span<const uint8_t> bytes,
                                                      const Limits& limits) {
  // The readers above return errors as values; what could still throw is allocation. A failure
  // here is the server's, never a reason to drop the connection or the process.
  try {
    return decode_request_or_throw(bytes, limits);
  } catch (const std::exception& e) {
    RejectedRequest rejected;
    rejected.error = Error{ErrorCode::kInternal, std::string("decoding failed: ") + e.what()};
    return rejected;
  }
}

std::variant<Request, RejectedRequest> read_request(const msgpack::object& root,
                                                    const Limits& limits) {
  try {
    return read_request_or_throw(root, limits);
  } catch (const std::exception& e) {
    RejectedRequest rejected;
    rejected.error = Error{ErrorCode::kInternal, std::string("decoding failed: ") + e.what()};
    return rejected;
  }
}

std::string encode_request(const Request& request) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  if (request.op == Op::kCancel) {
    out.map(2 + (request.id ? 1 : 0));
    out.str("v"), out.i64(kVersion);
    out.str("op"), out.str("cancel");
    if (request.id) out.str("id"), out.str(*request.id);
    return bytes;
  }
  out.map(3 + (request.id ? 1 : 0) + (request.timeout_ms ? 1 : 0) + (request.stream ? 1 : 0) +
          (request.model ? 1 : 0) + (request.version ? 1 : 0));
  out.str("v"), out.i64(kVersion);
  if (request.id) out.str("id"), out.str(*request.id);
  if (request.batch_form) {
    out.str("texts"), write_texts(out, request.texts);
  } else {
    out.str("text"), out.str(request.texts.empty() ? std::string_view() : request.texts[0]);
  }
  out.str("params"), out.params(request.params);
  if (request.timeout_ms) out.str("timeout_ms"), out.u64(*request.timeout_ms);
  if (request.stream) out.str("stream"), out.boolean(true);
  if (request.model) out.str("model"), out.str(*request.model);
  if (request.version) out.str("version"), out.u64(*request.version);
  return bytes;
}

}  // namespace seqpipe::protocol
