#include "msgpack_io.h"

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

void Writer::bin(const void* data, size_t bytes) {
  packer_.pack_bin(static_cast<uint32_t>(bytes));
  if (bytes > 0)
    packer_.pack_bin_body(static_cast<const char*>(data), static_cast<uint32_t>(bytes));
}

void Writer::f32(float value) {
  const auto bits = std::bit_cast<uint32_t>(value);
  const char bytes[5] = {'\xca', static_cast<char>(bits >> 24), static_cast<char>(bits >> 16),
                         static_cast<char>(bits >> 8), static_cast<char>(bits)};
  sink_.write(bytes, sizeof bytes);
}

void Writer::params(const protocol::GenerateParams& p) {
  map(p.priority != 0 ? 6 : 5);
  str("max_new_tokens"), i64(p.max_new_tokens);
  str("num_beams"), i64(p.num_beams);
  str("length_penalty"), f32(p.length_penalty);
  str("min_new_tokens"), i64(p.min_new_tokens);
  str("return_scores"), boolean(p.return_scores);
  if (p.priority != 0) str("priority"), i64(p.priority);
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

std::optional<Error> read_finite_float(const msgpack::object& value, std::string_view path,
                                       float& out) {
  double number = std::numeric_limits<double>::quiet_NaN();
  if (value.type == msgpack::type::FLOAT32 || value.type == msgpack::type::FLOAT64) {
    number = value.via.f64;
  } else if (value.type == msgpack::type::POSITIVE_INTEGER) {
    number = static_cast<double>(value.via.u64);
  } else if (value.type == msgpack::type::NEGATIVE_INTEGER) {
    number = static_cast<double>(value.via.i64);
  }
  // Checked before the cast: a double beyond float's range does not convert (undefined behaviour).
  if (!std::isfinite(number) || std::fabs(number) > std::numeric_limits<float>::max()) {
    return invalid(std::string(path) + " must be a finite number, got " + describe(value));
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
  const NamedSlot fields[] = {
      {"max_new_tokens", &max_new_tokens}, {"num_beams", &num_beams},
      {"length_penalty", &length_penalty}, {"min_new_tokens", &min_new_tokens},
      {"return_scores", &return_scores},   {"priority", &priority}};
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
  return std::nullopt;
}

}  // namespace seqpipe::msgpack_io
