#include "seqpipe/protocol/msgpack_io.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>

namespace seqpipe::msgpack_io {

namespace {

// Longest peer-supplied name (an unknown key) echoed in an error message.
constexpr size_t kMaxQuotedBytes = 64;

Error invalid(std::string message) {
  return {protocol::ErrorCode::kInvalidArgument, std::move(message)};
}

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

void Writer::str(std::string_view value) {
  packer_.pack_str(static_cast<uint32_t>(value.size()));
  packer_.pack_str_body(value.data(), static_cast<uint32_t>(value.size()));
}

void Writer::f32(float value) {
  const auto bits = std::bit_cast<uint32_t>(value);
  const char bytes[5] = {'\xca', static_cast<char>(bits >> 24), static_cast<char>(bits >> 16),
                         static_cast<char>(bits >> 8), static_cast<char>(bits)};
  sink_.write(bytes, sizeof bytes);
}

void Writer::params(const protocol::GenerateParams& p) {
  // The generation options only when not their defaults: a server that predates them reads a
  // request that does not use them.
  const protocol::GenerateParams d;
  const bool options[] = {p.priority != 0,
                          p.num_return_sequences != d.num_return_sequences,
                          p.repetition_penalty != d.repetition_penalty,
                          p.no_repeat_ngram_size != d.no_repeat_ngram_size,
                          p.do_sample != d.do_sample,
                          p.temperature != d.temperature,
                          p.top_k != d.top_k,
                          p.top_p != d.top_p,
                          p.seed.has_value(),
                          !p.stop.empty()};
  map(5 + static_cast<size_t>(std::count(std::begin(options), std::end(options), true)));
  str("max_new_tokens"), i64(p.max_new_tokens);
  str("num_beams"), i64(p.num_beams);
  str("length_penalty"), f32(p.length_penalty);
  str("min_new_tokens"), i64(p.min_new_tokens);
  str("return_scores"), boolean(p.return_scores);
  if (options[0]) str("priority"), i64(p.priority);
  if (options[1]) str("num_return_sequences"), i64(p.num_return_sequences);
  if (options[2]) str("repetition_penalty"), f32(p.repetition_penalty);
  if (options[3]) str("no_repeat_ngram_size"), i64(p.no_repeat_ngram_size);
  if (options[4]) str("do_sample"), boolean(p.do_sample);
  if (options[5]) str("temperature"), f32(p.temperature);
  if (options[6]) str("top_k"), i64(p.top_k);
  if (options[7]) str("top_p"), f32(p.top_p);
  if (options[8]) str("seed"), u64(*p.seed);
  if (options[9]) {
    str("stop"), array(p.stop.size());
    for (const std::string& s : p.stop) str(s);
  }
}

std::string quote_name(std::string_view name) {
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < kMaxQuotedBytes; ++i) {
    const auto byte = static_cast<unsigned char>(name[i]);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\' && byte != '\'') {
      out += static_cast<char>(byte);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
  }
  if (name.size() > kMaxQuotedBytes) out += "...";
  out += "'";
  return out;
}

std::string describe(const msgpack::object& value) {
  switch (value.type) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return value.via.boolean ? "true" : "false";
    case msgpack::type::POSITIVE_INTEGER:
      return std::to_string(value.via.u64);
    case msgpack::type::NEGATIVE_INTEGER:
      return std::to_string(value.via.i64);
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return "float " + format_number(value.via.f64);
    case msgpack::type::STR:
      return "a string";
    case msgpack::type::BIN:
      return "binary data";
    case msgpack::type::ARRAY:
      return "an array";
    case msgpack::type::MAP:
      return "a map";
    case msgpack::type::EXT:
      return "an ext value";
  }
  return "an unknown msgpack type";
}

std::optional<Error> read_int(const msgpack::object& value, std::string_view path, int64_t lo,
                              int64_t hi, int64_t& out) {
  bool in_range = false;
  if (value.type == msgpack::type::POSITIVE_INTEGER) {
    in_range = value.via.u64 <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
               static_cast<int64_t>(value.via.u64) >= lo &&
               static_cast<int64_t>(value.via.u64) <= hi;
    out = static_cast<int64_t>(value.via.u64);
  } else if (value.type == msgpack::type::NEGATIVE_INTEGER) {
    in_range = value.via.i64 >= lo && value.via.i64 <= hi;
    out = value.via.i64;
  }
  if (in_range) return std::nullopt;
  return invalid(std::string(path) + " must be an integer in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "], got " + describe(value));
}

std::optional<Error> read_float(const msgpack::object& value, std::string_view path,
                                bool allow_infinite, float& out) {
  double number = std::numeric_limits<double>::quiet_NaN();
  if (value.type == msgpack::type::FLOAT32 || value.type == msgpack::type::FLOAT64) {
    number = value.via.f64;
  } else if (value.type == msgpack::type::POSITIVE_INTEGER) {
    number = static_cast<double>(value.via.u64);
  } else if (value.type == msgpack::type::NEGATIVE_INTEGER) {
    number = static_cast<double>(value.via.i64);
  }
  // Checked before the cast: a double beyond float's range does not convert (undefined behaviour).
  const bool infinite = std::isinf(number);
  if (std::isnan(number) || (infinite && !allow_infinite) ||
      (!infinite && std::fabs(number) > std::numeric_limits<float>::max())) {
    return invalid(std::string(path) +
                   (allow_infinite ? " must be a number, not NaN" : " must be a finite number") +
                   ", got " + describe(value));
  }
  out = static_cast<float>(number);
  return std::nullopt;
}

std::optional<Error> read_bool(const msgpack::object& value, std::string_view path, bool& out) {
  if (value.type != msgpack::type::BOOLEAN) {
    return invalid(std::string(path) + " must be a boolean, got " + describe(value));
  }
  out = value.via.boolean;
  return std::nullopt;
}

std::optional<Error> collect_fields(const msgpack::object_map& map, std::string_view prefix,
                                    std::span<const NamedSlot> fields,
                                    std::optional<std::string>& first_unknown) {
  for (uint32_t i = 0; i < map.size; ++i) {
    const msgpack::object& key = map.ptr[i].key;
    if (key.type != msgpack::type::STR) {
      return invalid(std::string(prefix.empty() ? "field names" : "params keys") +
                     " must be strings, got " + describe(key));
    }
    const std::string_view name = as_string_view(key);
    auto known = std::find_if(fields.begin(), fields.end(),
                              [&](const NamedSlot& field) { return field.name == name; });
    if (known == fields.end()) {
      if (!first_unknown) first_unknown = quote_name(std::string(prefix) + std::string(name));
      continue;
    }
    if (*known->slot != nullptr) {
      return invalid("duplicate field " + quote_name(std::string(prefix) + std::string(name)));
    }
    *known->slot = &map.ptr[i].val;
  }
  return std::nullopt;
}

namespace {

struct GenerationOptionFields {
  const msgpack::object *num_return_sequences, *repetition_penalty, *no_repeat_ngram_size,
      *do_sample, *temperature, *top_k, *top_p, *seed, *stop;
};

std::optional<Error> read_positive_float(const msgpack::object* value, std::string_view path,
                                         float& out) {
  if (!value) return std::nullopt;
  if (auto error = read_finite_float(*value, path, out)) return error;
  if (!(out > 0.0f)) return invalid(std::string(path) + " must be > 0, got " + describe(*value));
  return std::nullopt;
}

std::optional<Error> read_stop(const msgpack::object& value, std::vector<std::string>& out) {
  if (value.type != msgpack::type::ARRAY || value.via.array.size > engine::kMaxStopSequences) {
    return invalid("params.stop must be an array of at most " +
                   std::to_string(engine::kMaxStopSequences) + " strings, got " + describe(value));
  }
  out.clear();
  for (uint32_t i = 0; i < value.via.array.size; ++i) {
    const msgpack::object& s = value.via.array.ptr[i];
    const std::string path = "params.stop[" + std::to_string(i) + "]";
    if (s.type != msgpack::type::STR)
      return invalid(path + " must be a string, got " + describe(s));
    const std::string_view text = as_string_view(s);
    if (text.empty() || text.size() > static_cast<size_t>(engine::kMaxStopBytes)) {
      return invalid(path + " must be 1.." + std::to_string(engine::kMaxStopBytes) +
                     " bytes, got " + std::to_string(text.size()));
    }
    if (auto bad = protocol::find_invalid_utf8(text)) {
      return invalid(path + " is not valid UTF-8 (byte " + std::to_string(*bad) + ")");
    }
    out.emplace_back(text);
  }
  return std::nullopt;
}

// The generation options, checked against each other once all are read.
std::optional<Error> read_generation_options(const GenerationOptionFields& f,
                                             protocol::GenerateParams& params) {
  int64_t number = 0;
  if (f.num_return_sequences) {
    if (auto error = read_int(*f.num_return_sequences, "params.num_return_sequences", 1,
                              engine::kMaxBeams, number)) {
      return error;
    }
    params.num_return_sequences = static_cast<int>(number);
  }
  if (auto error = read_positive_float(f.repetition_penalty, "params.repetition_penalty",
                                       params.repetition_penalty)) {
    return error;
  }
  if (f.no_repeat_ngram_size) {
    if (auto error = read_int(*f.no_repeat_ngram_size, "params.no_repeat_ngram_size", 0,
                              engine::kMaxNoRepeatNgramSize, number)) {
      return error;
    }
    params.no_repeat_ngram_size = static_cast<int>(number);
  }
  if (f.do_sample) {
    if (auto error = read_bool(*f.do_sample, "params.do_sample", params.do_sample)) return error;
  }
  if (auto error = read_positive_float(f.temperature, "params.temperature", params.temperature))
    return error;
  if (f.top_k) {
    if (auto error =
            read_int(*f.top_k, "params.top_k", 0, std::numeric_limits<int32_t>::max(), number)) {
      return error;
    }
    params.top_k = static_cast<int>(number);
  }
  if (auto error = read_positive_float(f.top_p, "params.top_p", params.top_p)) return error;
  if (params.top_p > 1.0f) {
    return invalid("params.top_p must be in (0, 1], got " +
                   std::to_string(static_cast<double>(params.top_p)));
  }
  if (f.seed) {
    if (auto error =
            read_int(*f.seed, "params.seed", 0, std::numeric_limits<int64_t>::max(), number)) {
      return error;
    }
    params.seed = static_cast<uint64_t>(number);
  }
  if (f.stop) {
    if (auto error = read_stop(*f.stop, params.stop)) return error;
  }
  if (params.num_return_sequences > params.num_beams) {
    return invalid("params.num_return_sequences (" + std::to_string(params.num_return_sequences) +
                   ") must not exceed params.num_beams (" + std::to_string(params.num_beams) + ")");
  }
  if (params.do_sample && params.num_beams > 1) {
    return invalid("params.do_sample needs params.num_beams 1 (beam sampling is not supported)");
  }
  return std::nullopt;
}

}  // namespace

std::optional<Error> read_params(const msgpack::object& value, const ParamBounds& bounds,
                                 protocol::GenerateParams& params) {
  if (value.type != msgpack::type::MAP) {
    return invalid("params must be a map, got " + describe(value));
  }
  const msgpack::object* max_new_tokens = nullptr;
  const msgpack::object* num_beams = nullptr;
  const msgpack::object* length_penalty = nullptr;
  const msgpack::object* min_new_tokens = nullptr;
  const msgpack::object* return_scores = nullptr;
  const msgpack::object* priority = nullptr;
  const msgpack::object* num_return_sequences = nullptr;
  const msgpack::object* repetition_penalty = nullptr;
  const msgpack::object* no_repeat_ngram_size = nullptr;
  const msgpack::object* do_sample = nullptr;
  const msgpack::object* temperature = nullptr;
  const msgpack::object* top_k = nullptr;
  const msgpack::object* top_p = nullptr;
  const msgpack::object* seed = nullptr;
  const msgpack::object* stop = nullptr;
  const NamedSlot fields[] = {{"max_new_tokens", &max_new_tokens},
                              {"num_beams", &num_beams},
                              {"length_penalty", &length_penalty},
                              {"min_new_tokens", &min_new_tokens},
                              {"return_scores", &return_scores},
                              {"priority", &priority},
                              {"num_return_sequences", &num_return_sequences},
                              {"repetition_penalty", &repetition_penalty},
                              {"no_repeat_ngram_size", &no_repeat_ngram_size},
                              {"do_sample", &do_sample},
                              {"temperature", &temperature},
                              {"top_k", &top_k},
                              {"top_p", &top_p},
                              {"seed", &seed},
                              {"stop", &stop}};
  std::optional<std::string> unknown;
  if (auto error = collect_fields(value.via.map, "params.", fields, unknown)) return error;
  if (unknown) return invalid("unknown field " + *unknown);

  int64_t number = 0;
  if (max_new_tokens) {
    if (auto error =
            read_int(*max_new_tokens, "params.max_new_tokens", 1, bounds.max_new_tokens, number)) {
      return error;
    }
    params.max_new_tokens = static_cast<int>(number);
  }
  if (num_beams) {
    if (auto error = read_int(*num_beams, "params.num_beams", 1, bounds.max_beams, number)) {
      return error;
    }
    params.num_beams = static_cast<int>(number);
  }
  if (length_penalty) {
    if (auto error =
            read_finite_float(*length_penalty, "params.length_penalty", params.length_penalty)) {
      return error;
    }
  }
  if (min_new_tokens) {
    if (auto error =
            read_int(*min_new_tokens, "params.min_new_tokens", 0, bounds.max_new_tokens, number)) {
      return error;
    }
    params.min_new_tokens = static_cast<int>(number);
  }
  if (params.min_new_tokens > params.max_new_tokens) {
    return invalid("params.min_new_tokens (" + std::to_string(params.min_new_tokens) +
                   ") must not exceed params.max_new_tokens (" +
                   std::to_string(params.max_new_tokens) + ")");
  }
  if (return_scores) {
    if (auto error = read_bool(*return_scores, "params.return_scores", params.return_scores)) {
      return error;
    }
  }
  if (priority) {
    if (auto error = read_int(*priority, "params.priority", 1, bounds.priority_levels, number)) {
      error->message += " (1 is the highest of the server's " +
                        std::to_string(bounds.priority_levels) + " priority level" +
                        (bounds.priority_levels == 1 ? ")" : "s)");
      return error;
    }
    params.priority = static_cast<int>(number);
  }
  return read_generation_options({num_return_sequences, repetition_penalty, no_repeat_ngram_size,
                                  do_sample, temperature, top_k, top_p, seed, stop},
                                 params);
}

}  // namespace seqpipe::msgpack_io
