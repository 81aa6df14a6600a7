#pragma once
// The msgpack pieces both wire codecs share: the client protocol (protocol.cc) and the stage
// messages (stage_messages.cc). Writing into a std::string with floats always as float32, the
// generation parameters under the client protocol's key names, and the checked readers of
// numbers, booleans, map fields and generation parameters, whose errors name the field at fault.
// The codec under protocol and the stage messages: the msgpack types stay out of the other public
// headers.
#include <cstddef>
#include <cstdint>
#include <msgpack.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "seqpipe/protocol/protocol.h"

namespace seqpipe::msgpack_io {

using protocol::Error;

// Appends msgpack to a string. Integers take their smallest encoding (msgpack-c's packer).
class Writer {
 public:
  explicit Writer(std::string& out) : sink_{out}, packer_(sink_) {}

  void map(size_t entries) { packer_.pack_map(static_cast<uint32_t>(entries)); }
  void array(size_t elements) { packer_.pack_array(static_cast<uint32_t>(elements)); }
  void str(std::string_view value);
  // Always a msgpack float32. msgpack-c's pack_float writes whole values (1.0f) as integers; a
  // reader decoding into a typed float field (Go, Rust) should not have to accept both.
  void f32(float value);
  void i64(int64_t value) { packer_.pack_int64(value); }
  void u64(uint64_t value) { packer_.pack_uint64(value); }
  void boolean(bool value) { value ? packer_.pack_true() : packer_.pack_false(); }
  void nil() { packer_.pack_nil(); }
  // The generation parameters under the client protocol's keys, row by row of the option table
  // (protocol::generate_options()): the rows marked always_written always, each other one only
  // when not its default.
  void params(const protocol::GenerateParams& params);

 private:
  struct Sink {  // msgpack's packer writes to anything with write(const char*, size_t)
    std::string& out;
    void write(const char* data, size_t size) { out.append(data, size); }
  };
  Sink sink_;
  msgpack::packer<Sink> packer_;
};

inline std::string_view as_string_view(const msgpack::object& value) {
  return {value.via.str.ptr, value.via.str.size};
}

// A peer-supplied name made safe for an error message (and so for logs): quoted, printable ASCII
// kept, every other byte as \xNN, cut at 64 bytes.
std::string quote_name(std::string_view name);
// What a value is, for "must be X, got Y" messages: numbers by value, everything else by kind.
std::string describe(const msgpack::object& value);

// Unpacks exactly one msgpack object filling all of `bytes` under `limit` (which keeps a few bytes
// claiming a huge array from making msgpack allocate for it), its strings pointing into `bytes`.
// Never throws msgpack's exceptions: an invalid_argument Error, or too_long for an array over
// the limit.
std::optional<Error> unpack_one(std::span<const uint8_t> bytes, const msgpack::unpack_limit& limit,
                                msgpack::object_handle& out);

// Each reader returns an invalid_argument Error naming `path`, or fills `out`.
// A string, viewed where it lies (in the unpacked bytes).
std::optional<Error> read_str(const msgpack::object& value, std::string_view path,
                              std::string_view& out);
// Integers only: a float is refused even when whole (2.0), so peers find type bugs early.
std::optional<Error> read_int(const msgpack::object& value, std::string_view path, int64_t lo,
                              int64_t hi, int64_t& out);
// A number (integer or float) as a float: not NaN and within float's range (checked before the
// cast, which is undefined beyond it); an infinity only with `allow_infinite` (a score may be
// -inf: a hypothesis of probability zero).
std::optional<Error> read_float(const msgpack::object& value, std::string_view path,
                                bool allow_infinite, float& out);
// Finite, and within float's range.
inline std::optional<Error> read_finite_float(const msgpack::object& value, std::string_view path,
                                              float& out) {
  return read_float(value, path, false, out);
}
std::optional<Error> read_bool(const msgpack::object& value, std::string_view path, bool& out);

// Fields of a map, found by name: `fields` lists (name, slot) pairs. A duplicate is an error; the
// first unknown name is left in `first_unknown` (quoted, prefixed) for the caller to report after
// more important errors (a v2 request is told about the version first).
struct NamedSlot {
  std::string_view name;
  const msgpack::object** slot;
};
std::optional<Error> collect_fields(const msgpack::object_map& map, std::string_view prefix,
                                    std::span<const NamedSlot> fields,
                                    std::optional<std::string>& first_unknown);

// The bounds `params` is read under: the client protocol's come from the config
// (protocol::Limits), the stage messages' from the engine's limits.
struct ParamBounds {
  int max_new_tokens = 1;   // params.max_new_tokens and min_new_tokens at most this
  int max_beams = 1;        // params.num_beams in [1, max_beams]
  int priority_levels = 1;  // params.priority in [1, priority_levels]; absent: 0
};
// The `params` map written by Writer::params, into `params` (absent fields keep their values),
// each option checked against the option table's range. Errors name "params.<field>" and the
// range; unknown fields are refused.
std::optional<Error> read_params(const msgpack::object& value, const ParamBounds& bounds,
                                 protocol::GenerateParams& params);

}  // namespace seqpipe::msgpack_io
