#include "seqpipe/protocol/protocol.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <msgpack.hpp>

#include "seqpipe/protocol/msgpack_io.h"

namespace seqpipe::protocol {
namespace {

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

// A v1 request nests two levels (the map, then params or texts). The margin lets an unknown field
// holding a small structure be reported by its name rather than as "nested too deep".
constexpr size_t kMaxNesting = 8;
// A request map has 7 known keys and params 15: a bigger map has unknown or duplicate keys
// anyway.
constexpr size_t kMaxMapEntries = 64;
// The only array in a request is texts[]. Up to this length (or max_texts if larger) a long
// texts[] is reported by name ("texts has 300 elements, at most 64").
constexpr size_t kMinArrayLimit = 1024;

Error invalid(std::string message) {
  return {ErrorCode::kInvalidArgument, std::move(message)};
}
Error too_long(std::string message) {
  return {ErrorCode::kTooLong, std::move(message)};
}

// The decoded strings point into the caller's buffer, which outlives the decoding: no copies.
bool reference_input(msgpack::type::object_type, size_t, void*) {
  return true;
}

// Unpacks exactly one msgpack object filling all of `bytes`. Never throws msgpack's exceptions.
std::optional<Error> unpack_one(std::span<const uint8_t> bytes, const msgpack::unpack_limit& limit,
                                msgpack::object_handle& out) {
  size_t offset = 0;
  try {
    out = msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size(), offset,
                          reference_input, nullptr, limit);
  } catch (const msgpack::depth_size_overflow&) {
    return invalid("message nests arrays or maps deeper than " + std::to_string(limit.depth()) +
                   " levels");
  } catch (const msgpack::array_size_overflow&) {
    return too_long("message holds an array of more than " + std::to_string(limit.array()) +
                    " elements");
  } catch (const msgpack::map_size_overflow&) {
    return invalid("message holds a map of more than " + std::to_string(limit.map()) + " entries");
  } catch (const msgpack::size_overflow&) {
    // A string, binary or ext longer than the whole frame: the frame is cut short.
    return invalid("message is truncated msgpack (a value is longer than the message)");
  } catch (const msgpack::insufficient_bytes&) {
    return invalid("message is truncated msgpack");
  } catch (const msgpack::unpack_error&) {
    return invalid("message is not valid msgpack");
  }
  if (offset != bytes.size()) {
    return invalid("message has " + std::to_string(bytes.size() - offset) +
                   " bytes after its first msgpack value");
  }
  return std::nullopt;
}

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

std::variant<Request, RejectedRequest> decode_request_or_throw(std::span<const uint8_t> bytes,
                                                               const Limits& limits) {
  auto reject = [](Error error, std::string id = {}) {
    return RejectedRequest{std::move(error), std::move(id)};
  };
  // Size first: an oversize frame is refused before any parsing work.
  if (bytes.size() > limits.max_message_bytes) {
    return reject(too_long("message is " + std::to_string(bytes.size()) + " bytes, at most " +
                           std::to_string(limits.max_message_bytes)));
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
    return reject(std::move(*error));
  }
  const msgpack::object& root = handle.get();
  if (root.type != msgpack::type::MAP) {
    return reject(invalid("request must be a msgpack map, got " + describe(root)));
  }

  const msgpack::object* v = nullptr;
  const msgpack::object* id = nullptr;
  const msgpack::object* text = nullptr;
  const msgpack::object* texts = nullptr;
  const msgpack::object* params = nullptr;
  const msgpack::object* timeout_ms = nullptr;
  const msgpack::object* op = nullptr;
  const msgpack::object* stream = nullptr;
  const NamedSlot fields[] = {{"v", &v},       {"stream", &stream},        {"id", &id},
                              {"text", &text}, {"texts", &texts},          {"params", &params},
                              {"op", &op},     {"timeout_ms", &timeout_ms}};
  std::optional<std::string> unknown;
  if (auto error = msgpack_io::collect_fields(root.via.map, "", fields, unknown)) {
    return reject(std::move(*error));
  }

  // The id is read first so that every later error reply can carry it; its own error is reported
  // in turn below, after the version.
  Request request;
  std::optional<Error> id_error;
  if (id) {
    std::string value;
    id_error = read_id(*id, limits, value);
    if (!id_error) request.id = std::move(value);
  }
  const std::string echo_id = request.id.value_or("");

  // The version before the other fields: a v2 request is told about the version, not about
  // fields this server does not know.
  if (!v) return reject(invalid("missing field 'v' (the protocol version, 1)"), echo_id);
  int64_t version = 0;
  if (read_int(*v, "v", kVersion, kVersion, version)) {
    return reject(invalid("v must be " + std::to_string(kVersion) +
                          " (the protocol version), got " + describe(*v)),
                  echo_id);
  }
  if (unknown) return reject(invalid("unknown field " + *unknown), echo_id);
  if (id_error) return reject(std::move(*id_error));

  if (op) {
    if (op->type != msgpack::type::STR) {
      return reject(invalid("op must be \"generate\" or \"cancel\", got " + describe(*op)),
                    echo_id);
    }
    const std::string_view name = as_string_view(*op);
    if (name == "cancel") {
      request.op = Op::kCancel;
    } else if (name != "generate") {
      return reject(invalid("op must be \"generate\" or \"cancel\", got " + quote_name(name)),
                    echo_id);
    }
  }
  if (request.op == Op::kCancel) {
    // A cancel names the request to cancel by its id and carries nothing else.
    if (!request.id)
      return reject(invalid("a cancel request needs the id of the request to cancel"));
    for (const auto& [name, field] :
         {std::pair{"text", text}, std::pair{"texts", texts}, std::pair{"params", params},
          std::pair{"timeout_ms", timeout_ms}, std::pair{"stream", stream}}) {
      if (field) {
        return reject(
            invalid(std::string("a cancel request carries only v, op and id, not '") + name + "'"),
            echo_id);
      }
    }
    return request;
  }

  if (text && texts) {
    return reject(invalid("request has both 'text' and 'texts' (send exactly one)"), echo_id);
  }
  if (!text && !texts) return reject(invalid("missing field 'text' (or 'texts')"), echo_id);
  if (text) {
    request.texts.resize(1);
    if (auto error = read_text(*text, "text", limits, request.texts[0])) {
      return reject(std::move(*error), echo_id);
    }
  } else {
    request.batch_form = true;
    if (auto error = read_texts(*texts, limits, request.texts)) {
      return reject(std::move(*error), echo_id);
    }
  }

  // An omitted max_new_tokens never exceeds the server's cap (a config may set it below the
  // default).
  request.params.max_new_tokens =
      std::min(request.params.max_new_tokens, limits.max_new_tokens_cap);
  if (params) {
    const msgpack_io::ParamBounds bounds{limits.max_new_tokens_cap, limits.max_beams,
                                         limits.priority_levels};
    if (auto error = msgpack_io::read_params(*params, bounds, request.params)) {
      return reject(std::move(*error), echo_id);
    }
  }

  if (timeout_ms) {
    int64_t value = 0;
    if (auto error = read_int(*timeout_ms, "timeout_ms", 1, limits.max_timeout_ms, value)) {
      return reject(std::move(*error), echo_id);
    }
    request.timeout_ms = static_cast<uint32_t>(value);
  }
  if (stream) {
    if (stream->type != msgpack::type::BOOLEAN)
      return reject(invalid("stream must be a boolean, got " + describe(*stream)), echo_id);
    request.stream = stream->via.boolean;
  }
  if (request.stream) {
    // A partial reply carries one text growing at its end: one text, one hypothesis.
    if (request.batch_form)
      return reject(invalid("stream needs the single-text form ('text', not 'texts')"), echo_id);
    if (request.params.num_beams != 1 || request.params.num_return_sequences != 1)
      return reject(invalid("stream needs params.num_beams 1 and params.num_return_sequences 1 "
                            "(a beam search's best text is known only at its end)"),
                    echo_id);
  }
  return request;
}

// --- Packing ----------------------------------------------------------------------------------

void write_texts(msgpack_io::Writer& out, const std::vector<std::string>& texts) {
  out.array(texts.size());
  for (const std::string& text : texts) out.str(text);
}

void write_timings(msgpack_io::Writer& out, const Timings& timings) {
  const std::pair<std::string_view, uint64_t> entries[] = {{"queue", timings.queue_us},
                                                           {"tokenize", timings.tokenize_us},
                                                           {"batch_wait", timings.batch_wait_us},
                                                           {"encode", timings.encode_us},
                                                           {"decode", timings.decode_us},
                                                           {"postprocess", timings.postprocess_us},
                                                           {"total", timings.total_us}};
  out.map(std::size(entries));
  for (const auto& [name, micros] : entries) out.str(name), out.u64(micros);
}

// --- Reply decoding (client side: tolerant of additions, strict about what it needs) --------

const msgpack::object* find_field(const msgpack::object_map& map, std::string_view name) {
  for (uint32_t i = 0; i < map.size; ++i) {
    const msgpack::object& key = map.ptr[i].key;
    if (key.type == msgpack::type::STR && as_string_view(key) == name) return &map.ptr[i].val;
  }
  return nullptr;
}

std::optional<Error> read_reply_string(const msgpack::object_map& map, std::string_view name,
                                       std::string& out) {
  const msgpack::object* value = find_field(map, name);
  if (!value || value->type != msgpack::type::STR) {
    return invalid("reply field '" + std::string(name) + "' must be a string");
  }
  out.assign(as_string_view(*value));
  return std::nullopt;
}

std::optional<Error> read_reply_texts(const msgpack::object_map& map, Reply& reply) {
  const msgpack::object* text = find_field(map, "text");
  const msgpack::object* texts = find_field(map, "texts");
  if ((text == nullptr) == (texts == nullptr)) {
    return invalid("an ok reply must carry exactly one of 'text' and 'texts'");
  }
  if (text) {
    if (text->type != msgpack::type::STR) return invalid("reply field 'text' must be a string");
    reply.texts.emplace_back(as_string_view(*text));
    return std::nullopt;
  }
  reply.batch_form = true;
  if (texts->type != msgpack::type::ARRAY) return invalid("reply field 'texts' must be an array");
  for (uint32_t i = 0; i < texts->via.array.size; ++i) {
    const msgpack::object& element = texts->via.array.ptr[i];
    if (element.type != msgpack::type::STR) {
      return invalid("reply field 'texts[" + std::to_string(i) + "]' must be a string");
    }
    reply.texts.emplace_back(as_string_view(element));
  }
  return std::nullopt;
}

std::optional<Error> read_reply_scores(const msgpack::object& value, Reply& reply) {
  if (value.type != msgpack::type::ARRAY || value.via.array.size != reply.texts.size()) {
    return invalid("reply field 'scores' must be an array of one number per text");
  }
  std::vector<float> scores;
  for (uint32_t i = 0; i < value.via.array.size; ++i) {
    const msgpack::object& score = value.via.array.ptr[i];
    if (score.type == msgpack::type::FLOAT32 || score.type == msgpack::type::FLOAT64) {
      scores.push_back(static_cast<float>(score.via.f64));
    } else if (score.type == msgpack::type::POSITIVE_INTEGER) {
      scores.push_back(static_cast<float>(score.via.u64));
    } else if (score.type == msgpack::type::NEGATIVE_INTEGER) {
      scores.push_back(static_cast<float>(score.via.i64));
    } else {
      return invalid("reply field 'scores[" + std::to_string(i) + "]' must be a number");
    }
  }
  reply.scores = std::move(scores);
  return std::nullopt;
}

std::optional<Error> read_reply_sequences(const msgpack::object& value, Reply& reply) {
  const Error bad =
      invalid("reply field 'sequences' must be an array, one per text, of arrays of {text, score}");
  if (value.type != msgpack::type::ARRAY || value.via.array.size != reply.texts.size()) return bad;
  std::vector<std::vector<Sequence>> sequences(value.via.array.size);
  for (uint32_t i = 0; i < value.via.array.size; ++i) {
    const msgpack::object& hypotheses = value.via.array.ptr[i];
    if (hypotheses.type != msgpack::type::ARRAY) return bad;
    for (uint32_t k = 0; k < hypotheses.via.array.size; ++k) {
      const msgpack::object& h = hypotheses.via.array.ptr[k];
      if (h.type != msgpack::type::MAP) return bad;
      const msgpack::object* text = find_field(h.via.map, "text");
      const msgpack::object* score = find_field(h.via.map, "score");
      if (!text || text->type != msgpack::type::STR || !score) return bad;
      float value_of_score = 0.0f;
      if (score->type == msgpack::type::FLOAT32 || score->type == msgpack::type::FLOAT64) {
        value_of_score = static_cast<float>(score->via.f64);
      } else if (score->type == msgpack::type::NEGATIVE_INTEGER) {
        value_of_score = static_cast<float>(score->via.i64);
      } else if (score->type == msgpack::type::POSITIVE_INTEGER) {
        value_of_score = static_cast<float>(score->via.u64);
      } else {
        return bad;
      }
      sequences[i].push_back({std::string(msgpack_io::as_string_view(*text)), value_of_score});
    }
  }
  reply.sequences = std::move(sequences);
  return std::nullopt;
}

std::optional<Error> read_reply_error(const msgpack::object* value, Reply& reply) {
  if (!value || value->type != msgpack::type::MAP) {
    return invalid("an error reply must carry an 'error' map");
  }
  std::string code;
  Error error;
  if (auto bad = read_reply_string(value->via.map, "code", code)) return bad;
  if (auto bad = read_reply_string(value->via.map, "message", error.message)) return bad;
  // Codes may be added within v1; a client that does not know one treats it as internal.
  error.code = parse_error_code(code).value_or(ErrorCode::kInternal);
  reply.error = std::move(error);
  return std::nullopt;
}

std::optional<Error> read_reply_timings(const msgpack::object& value, Timings& timings) {
  if (value.type != msgpack::type::MAP) return invalid("reply field 'timings_us' must be a map");
  const std::pair<std::string_view, uint64_t*> entries[] = {
      {"queue", &timings.queue_us},
      {"tokenize", &timings.tokenize_us},
      {"batch_wait", &timings.batch_wait_us},
      {"encode", &timings.encode_us},
      {"decode", &timings.decode_us},
      {"postprocess", &timings.postprocess_us},
      {"total", &timings.total_us}};
  for (const auto& [name, field] : entries) {
    const msgpack::object* micros = find_field(value.via.map, name);
    if (!micros) continue;
    if (micros->type != msgpack::type::POSITIVE_INTEGER) {
      return invalid("reply field 'timings_us." + std::string(name) +
                     "' must be a non-negative integer");
    }
    *field = micros->via.u64;
  }
  return std::nullopt;
}

std::variant<Reply, Error> decode_reply_or_throw(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return invalid("reply is empty");
  // The server is trusted more than a client, but a reply still cannot make us allocate much
  // beyond its own size: no container declares more elements than the reply has bytes.
  const msgpack::unpack_limit limit(bytes.size(), bytes.size() / 2, bytes.size(), bytes.size(),
                                    bytes.size(), kMaxNesting);
  msgpack::object_handle handle;
  if (auto error = unpack_one(bytes, limit, handle)) return std::move(*error);
  const msgpack::object& root = handle.get();
  if (root.type != msgpack::type::MAP) return invalid("reply must be a msgpack map");
  const msgpack::object_map& map = root.via.map;

  const msgpack::object* v = find_field(map, "v");
  if (!v || v->type != msgpack::type::POSITIVE_INTEGER ||
      v->via.u64 != static_cast<uint64_t>(kVersion)) {
    return invalid("reply field 'v' must be " + std::to_string(kVersion));
  }
  Reply reply;
  if (auto error = read_reply_string(map, "id", reply.id)) return std::move(*error);
  std::string status;
  if (auto error = read_reply_string(map, "status", status)) return std::move(*error);
  if (status == "ok") {
    reply.ok = true;
    if (auto error = read_reply_texts(map, reply)) return std::move(*error);
    if (const msgpack::object* scores = find_field(map, "scores")) {
      if (auto error = read_reply_scores(*scores, reply)) return std::move(*error);
    }
    if (const msgpack::object* sequences = find_field(map, "sequences")) {
      if (auto error = read_reply_sequences(*sequences, reply)) return std::move(*error);
    }
  } else if (status == "partial") {
    reply.partial = true;
    const msgpack::object* text = find_field(map, "text");
    if (!text || text->type != msgpack::type::STR)
      return invalid("a partial reply's 'text' must be a string");
    reply.texts.emplace_back(as_string_view(*text));
  } else if (status == "error") {
    reply.ok = false;
    if (auto error = read_reply_error(find_field(map, "error"), reply)) return std::move(*error);
  } else {
    return invalid("reply field 'status' must be \"ok\", \"partial\" or \"error\"");
  }
  if (const msgpack::object* timings = find_field(map, "timings_us")) {
    if (auto error = read_reply_timings(*timings, reply.timings)) return std::move(*error);
  }
  return reply;
}

}  // namespace

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
  }
  return "internal";
}

std::optional<ErrorCode> parse_error_code(std::string_view name) {
  for (ErrorCode code : {ErrorCode::kInvalidArgument, ErrorCode::kTooLong,
                         ErrorCode::kDeadlineExceeded, ErrorCode::kOverloaded, ErrorCode::kInternal,
                         ErrorCode::kUnavailable, ErrorCode::kCancelled}) {
    if (wire_name(code) == name) return code;
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
  out.map(3 + (request.id ? 1 : 0) + (request.timeout_ms ? 1 : 0) + (request.stream ? 1 : 0));
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
  return bytes;
}

Reply error_reply(std::string id, Error error) {
  Reply reply;
  reply.id = std::move(id);
  reply.ok = false;
  reply.error = std::move(error);
  return reply;
}

std::string encode_reply(const Reply& reply) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  if (reply.partial) {
    out.map(4);
    out.str("v"), out.i64(kVersion);
    out.str("id"), out.str(reply.id);
    out.str("status"), out.str("partial");
    out.str("text"), out.str(reply.texts.empty() ? std::string_view() : reply.texts[0]);
    return bytes;
  }
  const bool with_scores = reply.ok && reply.scores.has_value();
  const bool with_sequences = reply.ok && reply.sequences.has_value();
  out.map(5 + (with_scores ? 1 : 0) + (with_sequences ? 1 : 0));
  out.str("v"), out.i64(kVersion);
  out.str("id"), out.str(reply.id);
  out.str("status"), out.str(reply.ok ? "ok" : "error");
  if (reply.ok) {
    if (reply.batch_form) {
      out.str("texts"), write_texts(out, reply.texts);
    } else {
      out.str("text"), out.str(reply.texts.empty() ? std::string_view() : reply.texts[0]);
    }
    if (with_scores) {
      out.str("scores"), out.array(reply.scores->size());
      for (float score : *reply.scores) out.f32(score);
    }
    if (with_sequences) {
      out.str("sequences"), out.array(reply.sequences->size());
      for (const auto& hypotheses : *reply.sequences) {
        out.array(hypotheses.size());
        for (const Sequence& h : hypotheses) {
          out.map(2);
          out.str("text"), out.str(h.text);
          out.str("score"), out.f32(h.score);
        }
      }
    }
  } else {
    // An error reply without an Error is a server bug; it still goes out as a valid reply.
    const Error fallback{ErrorCode::kInternal, "unspecified error"};
    const Error& error = reply.error ? *reply.error : fallback;
    out.str("error"), out.map(2);
    out.str("code"), out.str(wire_name(error.code));
    out.str("message"), out.str(error.message);
  }
  out.str("timings_us"), write_timings(out, reply.timings);
  return bytes;
}

std::variant<Reply, Error> decode_reply(std::span<const uint8_t> bytes) {
  try {
    return decode_reply_or_throw(bytes);
  } catch (const std::exception& e) {
    return Error{ErrorCode::kInternal, std::string("decoding the reply failed: ") + e.what()};
  }
}

}  // namespace seqpipe::protocol
