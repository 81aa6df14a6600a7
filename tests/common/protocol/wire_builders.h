#pragma once
// What the protocol tests (protocol*_test.cc) share: arbitrary msgpack built value by value (valid
// or not for the protocol), the smallest valid request to vary, and decoding it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <msgpack.hpp>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "seqpipe/protocol/protocol.h"

namespace seqpipe::protocol::wire_test {

inline std::span<const uint8_t> as_bytes(const std::string& bytes) {
  return {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
}

// --- Building arbitrary msgpack (valid or not for the protocol) ------------------------------

using Packer = msgpack::packer<msgpack::sbuffer>;
using Value = std::function<void(Packer&)>;
using Fields = std::vector<std::pair<std::string, Value>>;

inline Value str(std::string s) {
  return [s](Packer& p) { p.pack(s); };
}
inline Value integer(int64_t v) {
  return [v](Packer& p) { p.pack(v); };
}
inline Value uinteger(uint64_t v) {
  return [v](Packer& p) { p.pack(v); };
}
// Always a msgpack float64: msgpack-c's pack_double writes whole numbers (5.0) as integers, and
// these tests need the float a Python client would send.
inline Value real(double v) {
  return [v](Packer& p) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    std::string bytes(1, '\xcb');
    for (int shift = 56; shift >= 0; shift -= 8) bytes += static_cast<char>(bits >> shift);
    p.pack_str_body(bytes.data(), static_cast<uint32_t>(bytes.size()));
  };
}
inline Value boolean(bool v) {
  return [v](Packer& p) { p.pack(v); };
}
inline Value nil() {
  return [](Packer& p) { p.pack_nil(); };
}
inline Value binary(std::string s) {
  return [s](Packer& p) {
    p.pack_bin(static_cast<uint32_t>(s.size()));
    p.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
  };
}
inline Value array(std::vector<Value> elements) {
  return [elements](Packer& p) {
    p.pack_array(static_cast<uint32_t>(elements.size()));
    for (const Value& element : elements) element(p);
  };
}
inline Value map(Fields fields) {
  return [fields](Packer& p) {
    p.pack_map(static_cast<uint32_t>(fields.size()));
    for (const auto& [key, value] : fields) {
      p.pack(key);
      value(p);
    }
  };
}
// Raw bytes spliced in as one value (for hostile headers).
inline Value raw(std::string bytes) {
  return [bytes](Packer& p) {
    // The packer's buffer is reachable only through write(); pack_*_body writes verbatim.
    p.pack_str_body(bytes.data(), static_cast<uint32_t>(bytes.size()));
  };
}

// `depth` arrays, each holding the next, nil in the innermost.
inline std::string nested_arrays(int depth) {
  std::string bytes(static_cast<size_t>(depth), '\x91');  // fixarray of one element
  return bytes + '\xc0';                                  // nil at the bottom
}

inline std::string encode(const Value& value) {
  msgpack::sbuffer buffer;
  Packer packer(buffer);
  value(packer);
  return std::string(buffer.data(), buffer.size());
}

// The smallest valid request, to be varied one field at a time.
inline Fields base() {
  return {{"v", integer(1)}, {"text", str("teh speling")}};
}

inline Fields with(Fields fields, const std::string& key, Value value) {
  for (auto& field : fields) {
    if (field.first == key) {
      field.second = std::move(value);
      return fields;
    }
  }
  fields.emplace_back(key, std::move(value));
  return fields;
}

inline Fields without(Fields fields, const std::string& key) {
  std::erase_if(fields, [&](const auto& field) { return field.first == key; });
  return fields;
}

inline Fields with_params(Fields params) {
  return with(base(), "params", map(std::move(params)));
}

inline std::variant<Request, RejectedRequest> decode(const std::string& bytes,
                                                     const Limits& limits = {}) {
  return decode_request(as_bytes(bytes), limits);
}

inline Request decode_ok(const std::string& bytes, const Limits& limits = {}) {
  auto result = decode(bytes, limits);
  if (auto* rejected = std::get_if<RejectedRequest>(&result)) {
    ADD_FAILURE() << "rejected: " << wire_name(rejected->error.code) << ": "
                  << rejected->error.message;
    return {};
  }
  return std::get<Request>(result);
}

inline RejectedRequest decode_rejected(const std::string& bytes, const Limits& limits = {}) {
  auto result = decode(bytes, limits);
  if (std::holds_alternative<Request>(result)) {
    ADD_FAILURE() << "accepted a request that should be rejected";
    return {};
  }
  return std::get<RejectedRequest>(result);
}

}  // namespace seqpipe::protocol::wire_test
