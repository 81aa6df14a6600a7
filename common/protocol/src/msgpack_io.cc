#include "seqpipe/protocol/msgpack_io.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <type_traits>
#include <variant>

#include "seqpipe/protocol/generate_options.h"

namespace seqpipe::msgpack_io {

namespace {

// Longest peer-supplied name (an unknown key) echoed in an error message.
constexpr size_t kMaxQuotedBytes = 64;

Error invalid(std::string message) {
  return {protocol::ErrorCode::kInvalidArgument, std::move(message)};
}
Error too_long(std::string message) {
  return {protocol::ErrorCode::kTooLong, std::move(message)};
}

// The decoded strings point into the caller's buffer, which outlives the decoding: no copies.
bool reference_input(msgpack::type::object_type, size_t, void*) {
  return true;
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
  // An option that not every server knows only when set: a server that predates it reads a
  // request that does not use it.
  auto written = [&](const protocol::GenerateOption& option) {
    return option.always_written || !protocol::is_default(option, p);
  };
  size_t entries = 0;
  for (const auto& option : protocol::generate_options()) entries += written(option) ? 1 : 0;
  map(entries);
  for (const auto& option : protocol::generate_options()) {
    if (!written(option)) continue;
    str(option.name);
    std::visit(
        [&](auto member) {
          const auto& value = p.*member;
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, bool>) {
            boolean(value);
          } else if constexpr (std::is_same_v<T, int>) {
            i64(value);
          } else if constexpr (std::is_same_v<T, float>) {
            f32(value);
          } else if constexpr (std::is_same_v<T, std::optional<uint64_t>>) {
            u64(*value);
          } else {
            array(value.size());
            for (const std::string& s : value) str(s);
          }
        },
        option.member);
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

std::optional<Error> read_str(const msgpack::object& value, std::string_view path,
                              std::string_view& out) {
  if (value.type != msgpack::type::STR)
    return invalid(std::string(path) + " must be a string, got " + describe(value));
  out = as_string_view(value);
  return std::nullopt;
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

std::optional<Error> read_stop(const msgpack::object& value, std::vector<std::string>& out) {
  if (value.type != msgpack::type::ARRAY || value.via.array.size > generation::kMaxStopSequences) {
    return invalid("params.stop must be an array of at most " +
                   std::to_string(generation::kMaxStopSequences) + " strings, got " +
                   describe(value));
  }
  out.clear();
  for (uint32_t i = 0; i < value.via.array.size; ++i) {
    const msgpack::object& s = value.via.array.ptr[i];
    const std::string path = "params.stop[" + std::to_string(i) + "]";
    if (s.type != msgpack::type::STR)
      return invalid(path + " must be a string, got " + describe(s));
    const std::string_view text = as_string_view(s);
    if (text.empty() || text.size() > static_cast<size_t>(generation::kMaxStopBytes)) {
      return invalid(path + " must be 1.." + std::to_string(generation::kMaxStopBytes) +
                     " bytes, got " + std::to_string(text.size()));
    }
    if (auto bad = protocol::find_invalid_utf8(text)) {
      return invalid(path + " is not valid UTF-8 (byte " + std::to_string(*bad) + ")");
    }
    out.emplace_back(text);
  }
  return std::nullopt;
}

int64_t upper_bound(const protocol::OptionRange& range, const ParamBounds& bounds) {
  switch (range.upper) {
    case protocol::UpperBound::kMaxNewTokens:
      return bounds.max_new_tokens;
    case protocol::UpperBound::kMaxBeams:
      return bounds.max_beams;
    case protocol::UpperBound::kPriorityLevels:
      return bounds.priority_levels;
    case protocol::UpperBound::kInt64Max:
      return std::numeric_limits<int64_t>::max();
    case protocol::UpperBound::kNone:
      break;
  }
  return static_cast<int64_t>(range.hi);
}

std::optional<Error> read_float_option(const msgpack::object& value, const std::string& path,
                                       const protocol::GenerateOption& option, float& out) {
  float number = 0.0f;
  if (auto error = read_finite_float(value, path, number)) return error;
  const protocol::OptionRange& r = option.range;
  const double x = number;
  if (x < r.lo || (r.lo_open && x == r.lo) || x > r.hi) {
    return invalid(path + " must be " + (std::isinf(r.hi) ? "" : "in ") +
                   protocol::range_text(option) + ", got " + describe(value));
  }
  out = number;
  return std::nullopt;
}

// One option's value, under the table's range (integers with `bounds` for the configured ones).
std::optional<Error> read_option(const msgpack::object& value,
                                 const protocol::GenerateOption& option, const ParamBounds& bounds,
                                 protocol::GenerateParams& params) {
  const std::string path = "params." + std::string(option.name);
  return std::visit(
      [&](auto member) -> std::optional<Error> {
        auto& out = params.*member;
        using T = std::decay_t<decltype(out)>;
        if constexpr (std::is_same_v<T, bool>) {
          return read_bool(value, path, out);
        } else if constexpr (std::is_same_v<T, float>) {
          return read_float_option(value, path, option, out);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          return read_stop(value, out);
        } else {
          int64_t number = 0;
          auto error = read_int(value, path, static_cast<int64_t>(option.range.lo),
                                upper_bound(option.range, bounds), number);
          if (error) return error;
          if constexpr (std::is_same_v<T, int>) {
            out = static_cast<int>(number);
          } else {
            out = static_cast<uint64_t>(number);
          }
          return std::nullopt;
        }
      },
      option.member);
}

// The rules between options, checked once all are read.
std::optional<Error> check_together(const protocol::GenerateParams& params) {
  if (params.min_new_tokens > params.max_new_tokens) {
    return invalid("params.min_new_tokens (" + std::to_string(params.min_new_tokens) +
                   ") must not exceed params.max_new_tokens (" +
                   std::to_string(params.max_new_tokens) + ")");
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
  const auto options = protocol::generate_options();
  std::array<const msgpack::object*, protocol::kGenerateOptionCount> found{};
  std::array<NamedSlot, protocol::kGenerateOptionCount> fields;
  for (size_t i = 0; i < options.size(); ++i) fields[i] = {options[i].name, &found[i]};
  std::optional<std::string> unknown;
  if (auto error = collect_fields(value.via.map, "params.", fields, unknown)) return error;
  if (unknown) return invalid("unknown field " + *unknown);
  for (size_t i = 0; i < options.size(); ++i) {
    if (!found[i]) continue;
    if (auto error = read_option(*found[i], options[i], bounds, params)) {
      if (options[i].range.upper == protocol::UpperBound::kPriorityLevels) {
        error->message += " (1 is the highest of the server's " +
                          std::to_string(bounds.priority_levels) + " priority level" +
                          (bounds.priority_levels == 1 ? ")" : "s)");
      }
      return error;
    }
  }
  return check_together(params);
}

}  // namespace seqpipe::msgpack_io
