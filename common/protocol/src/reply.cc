// The replies: written by the gateway, read by the clients (tolerant of additions, strict
// about what they need).
#include <limits>
#include <msgpack.hpp>

#include "codec.h"
#include "seqpipe/protocol/msgpack_io.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::protocol {
namespace {

using codec::invalid;
using codec::kMaxNesting;
using codec::unpack_one;
using codec::write_texts;
using msgpack_io::as_string_view;

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

// Tolerant as decode_reply is: a reason this client does not know reads as kStop (the text
// ended for a reason other than eos or the length).
std::optional<Error> read_reply_usage(const msgpack::object& value, Reply& reply) {
  const Error bad = invalid(
      "reply field 'usage' must be an array, one per text, of {prompt_tokens, completion_tokens, "
      "finish_reason}");
  if (value.type != msgpack::type::ARRAY || value.via.array.size != reply.texts.size()) return bad;
  for (uint32_t i = 0; i < value.via.array.size; ++i) {
    const msgpack::object& u = value.via.array.ptr[i];
    if (u.type != msgpack::type::MAP) return bad;
    const msgpack::object* prompt = find_field(u.via.map, "prompt_tokens");
    const msgpack::object* completion = find_field(u.via.map, "completion_tokens");
    const msgpack::object* reason = find_field(u.via.map, "finish_reason");
    for (const msgpack::object* count : {prompt, completion}) {
      if (!count || count->type != msgpack::type::POSITIVE_INTEGER ||
          count->via.u64 > std::numeric_limits<uint32_t>::max())
        return bad;
    }
    if (!reason || reason->type != msgpack::type::STR) return bad;
    reply.usage.push_back(
        {static_cast<uint32_t>(prompt->via.u64), static_cast<uint32_t>(completion->via.u64),
         parse_finish_reason(as_string_view(*reason)).value_or(FinishReason::kStop)});
  }
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
    if (const msgpack::object* usage = find_field(map, "usage")) {
      if (auto error = read_reply_usage(*usage, reply)) return std::move(*error);
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
  const bool with_usage = reply.ok && !reply.usage.empty();
  out.map(5 + (with_scores ? 1 : 0) + (with_sequences ? 1 : 0) + (with_usage ? 1 : 0));
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
    if (with_usage) {
      out.str("usage"), out.array(reply.usage.size());
      for (const Usage& u : reply.usage) {
        out.map(3);
        out.str("prompt_tokens"), out.u64(u.prompt_tokens);
        out.str("completion_tokens"), out.u64(u.completion_tokens);
        out.str("finish_reason"), out.str(wire_name(u.finish_reason));
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
