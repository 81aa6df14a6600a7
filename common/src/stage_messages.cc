#include "seqpipe/common/stage_messages.h"

#include <bit>
#include <cmath>
#include <limits>
#include <msgpack.hpp>

namespace seqpipe::stage {

namespace {

using protocol::Error;
using protocol::ErrorCode;

constexpr std::string_view kKindNames[] = {"ready",       "credit",  "tokenize", "sequence",
                                           "encode",      "encoded", "decode",   "decoded",
                                           "postprocess", "result",  "cancel",   "heartbeat"};

using Packer = msgpack::packer<msgpack::sbuffer>;

void pack_str(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// Always a msgpack float32 (msgpack-c's pack_float writes whole values as integers).
void pack_float32(msgpack::sbuffer& buf, float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const char bytes[5] = {static_cast<char>(0xca), static_cast<char>(bits >> 24),
                         static_cast<char>(bits >> 16), static_cast<char>(bits >> 8),
                         static_cast<char>(bits)};
  buf.write(bytes, 5);
}

void pack_item(msgpack::sbuffer& buf, Packer& pk, const WorkItem& w) {
  pk.pack_map((w.error ? 13 : 12) + (w.batcher.empty() ? 0 : 1) + (w.alternatives.empty() ? 0 : 1));
  pack_str(pk, "r"), pk.pack_uint64(w.request);
  pack_str(pk, "i"), pk.pack_uint32(w.index);
  pack_str(pk, "g"), pack_str(pk, w.gateway);
  pack_str(pk, "dl"), pk.pack_int64(w.deadline_unix_us);
  if (!w.batcher.empty()) pack_str(pk, "b"), pack_str(pk, w.batcher);
  pack_str(pk, "p");
  pk.pack_map(w.params.priority != 0 ? 6 : 5);
  pack_str(pk, "mnt"), pk.pack_int32(w.params.max_new_tokens);
  pack_str(pk, "nb"), pk.pack_int32(w.params.num_beams);
  pack_str(pk, "lp"), pack_float32(buf, w.params.length_penalty);
  pack_str(pk, "min"), pk.pack_int32(w.params.min_new_tokens);
  pack_str(pk, "rs"), w.params.return_scores ? pk.pack_true() : pk.pack_false();
  if (w.params.priority != 0) pack_str(pk, "pr"), pk.pack_int32(w.params.priority);
  pack_str(pk, "t"), pack_str(pk, w.text);
  pack_str(pk, "ids");
  pk.pack_array(static_cast<uint32_t>(w.ids.size()));
  for (int32_t id : w.ids) pk.pack_int32(id);
  if (!w.alternatives.empty()) {
    pack_str(pk, "alt");
    pk.pack_array(static_cast<uint32_t>(w.alternatives.size()));
    for (const auto& alt : w.alternatives) {
      pk.pack_array(static_cast<uint32_t>(alt.size()));
      for (int32_t id : alt) pk.pack_int32(id);
    }
  }
  pack_str(pk, "rows"), pk.pack_int64(w.rows);
  pack_str(pk, "h");
  pk.pack_bin(static_cast<uint32_t>(w.hidden.size()));
  pk.pack_bin_body(w.hidden.data(), static_cast<uint32_t>(w.hidden.size()));
  pack_str(pk, "s"), pack_float32(buf, w.score);
  pack_str(pk, "tm");
  pk.pack_array(6);
  for (uint64_t t : {w.timings.queue_us, w.timings.tokenize_us, w.timings.batch_wait_us,
                     w.timings.encode_us, w.timings.decode_us, w.timings.postprocess_us}) {
    pk.pack_uint64(t);
  }
  pack_str(pk, "x");  // reserved for heartbeat/liveness data (issue 4); nil today
  pk.pack_nil();
  if (w.error) {
    pack_str(pk, "e");
    pk.pack_map(2);
    pack_str(pk, "c"), pack_str(pk, protocol::wire_name(w.error->code));
    pack_str(pk, "m"), pack_str(pk, w.error->message);
  }
}

// Reads one decoded msgpack object tree into a StageMessage, checking every field.
// Beam search's other hypotheses a decoder returns at most (the engine's num_beams limit - 1).
constexpr uint32_t kMaxAlternatives = 15;

class Reader {
 public:
  explicit Reader(const Limits& limits) : limits_(limits) {}

  std::optional<Error> message(const msgpack::object& o, StageMessage& out) {
    if (o.type != msgpack::type::MAP) return bad("message is not a map");
    bool have_v = false, have_kind = false;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      std::string_view key;
      if (!str(kv.key, key)) return bad("a key is not a string");
      if (key == "v") {
        int64_t v = 0;
        if (!integer(kv.val, v) || v != kVersion)
          return bad("v must be " + std::to_string(kVersion));
        have_v = true;
      } else if (key == "kind") {
        std::string_view k;
        if (!str(kv.val, k)) return bad("kind must be a string");
        bool found = false;
        for (size_t n = 0; n < std::size(kKindNames); ++n) {
          if (kKindNames[n] == k) {
            out.kind = static_cast<MessageKind>(n);
            found = true;
          }
        }
        if (!found) return bad("unknown kind '" + std::string(k) + "'");
        have_kind = true;
      } else if (key == "credits") {
        int64_t c = 0;
        if (!integer(kv.val, c) || c < 0 || c > 1'000'000)
          return bad("credits must be an integer in [0, 1000000]");
        out.credits = static_cast<int32_t>(c);
      } else if (key == "items") {
        if (kv.val.type != msgpack::type::ARRAY) return bad("items must be an array");
        if (kv.val.via.array.size > limits_.max_items)
          return bad("more than " + std::to_string(limits_.max_items) + " items");
        out.items.resize(kv.val.via.array.size);
        for (uint32_t n = 0; n < kv.val.via.array.size; ++n) {
          if (auto e = item(kv.val.via.array.ptr[n], out.items[n], n)) return e;
        }
      } else {
        return bad("unknown field '" + std::string(key) + "'");
      }
    }
    if (!have_v) return bad("v is missing");
    if (!have_kind) return bad("kind is missing");
    return std::nullopt;
  }

 private:
  static Error bad(std::string message) {
    return {ErrorCode::kInvalidArgument, "stage message: " + std::move(message)};
  }

  static bool str(const msgpack::object& o, std::string_view& out) {
    if (o.type != msgpack::type::STR) return false;
    out = std::string_view(o.via.str.ptr, o.via.str.size);
    return true;
  }
  static bool integer(const msgpack::object& o, int64_t& out) {
    if (o.type == msgpack::type::POSITIVE_INTEGER) {
      if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      out = static_cast<int64_t>(o.via.u64);
      return true;
    }
    if (o.type == msgpack::type::NEGATIVE_INTEGER) {
      out = o.via.i64;
      return true;
    }
    return false;
  }
  static bool unsigned_integer(const msgpack::object& o, uint64_t& out) {
    if (o.type != msgpack::type::POSITIVE_INTEGER) return false;
    out = o.via.u64;
    return true;
  }
  static bool number(const msgpack::object& o, float& out) {
    if (o.type == msgpack::type::FLOAT32 || o.type == msgpack::type::FLOAT64) {
      out = static_cast<float>(o.via.f64);
      return true;
    }
    int64_t i = 0;
    if (!integer(o, i)) return false;
    out = static_cast<float>(i);
    return true;
  }
  static bool small_int(const msgpack::object& o, int lo, int hi, int& out) {
    int64_t v = 0;
    if (!integer(o, v) || v < lo || v > hi) return false;
    out = static_cast<int>(v);
    return true;
  }

  // An array of at most max_ids token ids (non-negative int32).
  std::optional<Error> token_ids(const msgpack::object& v, const std::string& field,
                                 std::vector<int32_t>& out) const {
    if (v.type != msgpack::type::ARRAY || v.via.array.size > limits_.max_ids)
      return bad(field + " must be an array within the size limit");
    out.resize(v.via.array.size);
    for (uint32_t k = 0; k < v.via.array.size; ++k) {
      int64_t id = 0;
      if (!integer(v.via.array.ptr[k], id) || id < 0 || id > std::numeric_limits<int32_t>::max()) {
        return bad(field + "[" + std::to_string(k) + "] must be a token id");
      }
      out[k] = static_cast<int32_t>(id);
    }
    return std::nullopt;
  }

  std::optional<Error> item(const msgpack::object& o, WorkItem& w, uint32_t n) {
    const std::string at = "items[" + std::to_string(n) + "]";
    if (o.type != msgpack::type::MAP) return bad(at + " is not a map");
    bool have_r = false;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const auto& kv = o.via.map.ptr[i];
      std::string_view key;
      if (!str(kv.key, key)) return bad(at + ": a key is not a string");
      const std::string field = at + "." + std::string(key);
      const msgpack::object& v = kv.val;
      if (key == "r") {
        if (!unsigned_integer(v, w.request)) return bad(field + " must be an unsigned integer");
        have_r = true;
      } else if (key == "i") {
        uint64_t idx = 0;
        if (!unsigned_integer(v, idx) || idx > std::numeric_limits<uint32_t>::max())
          return bad(field + " must be a uint32");
        w.index = static_cast<uint32_t>(idx);
      } else if (key == "g") {
        std::string_view s;
        if (!str(v, s) || s.size() > 256)
          return bad(field + " must be a string of at most 256 bytes");
        w.gateway = s;
      } else if (key == "b") {
        std::string_view s;
        if (!str(v, s) || s.size() > 256)
          return bad(field + " must be a string of at most 256 bytes");
        w.batcher = s;
      } else if (key == "dl") {
        if (!integer(v, w.deadline_unix_us)) return bad(field + " must be an integer");
      } else if (key == "p") {
        if (auto e = params(v, w.params, field)) return e;
      } else if (key == "t") {
        std::string_view s;
        if (!str(v, s) || s.size() > limits_.max_text_bytes)
          return bad(field + " must be a string within the size limit");
        w.text = s;
      } else if (key == "ids") {
        if (auto e = token_ids(v, field, w.ids)) return *e;
      } else if (key == "alt") {
        if (v.type != msgpack::type::ARRAY || v.via.array.size > kMaxAlternatives) {
          return bad(field + " must be an array of at most " + std::to_string(kMaxAlternatives) +
                     " id arrays");
        }
        w.alternatives.resize(v.via.array.size);
        for (uint32_t k = 0; k < v.via.array.size; ++k) {
          if (auto e = token_ids(v.via.array.ptr[k], field + "[" + std::to_string(k) + "]",
                                 w.alternatives[k]))
            return *e;
        }
      } else if (key == "rows") {
        if (!integer(v, w.rows) || w.rows < 0)
          return bad(field + " must be a non-negative integer");
      } else if (key == "h") {
        if (v.type != msgpack::type::BIN || v.via.bin.size > limits_.max_hidden_bytes ||
            v.via.bin.size % 4 != 0) {
          return bad(field + " must be float32 bytes within the size limit");
        }
        w.hidden.assign(v.via.bin.ptr, v.via.bin.size);
      } else if (key == "s") {
        // NaN would reach clients as a score and never compares equal (found by tests/fuzz).
        if (!number(v, w.score) || std::isnan(w.score))
          return bad(field + " must be a number, not NaN");
      } else if (key == "tm") {
        if (v.type != msgpack::type::ARRAY || v.via.array.size != 6)
          return bad(field + " must be an array of 6 integers");
        uint64_t* slots[6] = {&w.timings.queue_us,      &w.timings.tokenize_us,
                              &w.timings.batch_wait_us, &w.timings.encode_us,
                              &w.timings.decode_us,     &w.timings.postprocess_us};
        for (int k = 0; k < 6; ++k) {
          if (!unsigned_integer(v.via.array.ptr[k], *slots[k]))
            return bad(field + " must be an array of 6 integers");
        }
      } else if (key == "x") {
        if (v.type != msgpack::type::NIL) return bad(field + " must be nil in version 1");
      } else if (key == "e") {
        if (v.type != msgpack::type::MAP || v.via.map.size != 2)
          return bad(field + " must be {c, m}");
        Error err;
        for (uint32_t k = 0; k < 2; ++k) {
          std::string_view ek, ev;
          if (!str(v.via.map.ptr[k].key, ek) || !str(v.via.map.ptr[k].val, ev))
            return bad(field + " must be {c, m}");
          if (ek == "c") {
            auto code = protocol::parse_error_code(ev);
            if (!code) return bad(field + ".c is not an error code");
            err.code = *code;
          } else if (ek == "m") {
            err.message = ev;
          } else {
            return bad(field + " must be {c, m}");
          }
        }
        w.error = err;
      } else {
        return bad("unknown field '" + field + "'");
      }
    }
    if (!have_r) return bad(at + ".r is missing");
    if (w.rows > 0 && w.hidden.empty()) return bad(at + ": rows without hidden");
    return std::nullopt;
  }

  std::optional<Error> params(const msgpack::object& o, protocol::GenerateParams& p,
                              const std::string& field) {
    if (o.type != msgpack::type::MAP) return bad(field + " must be a map");
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      std::string_view key;
      if (!str(o.via.map.ptr[i].key, key)) return bad(field + ": a key is not a string");
      const msgpack::object& v = o.via.map.ptr[i].val;
      const std::string f = field + "." + std::string(key);
      if (key == "mnt") {
        if (!small_int(v, 1, 4096, p.max_new_tokens)) return bad(f + " must be in [1, 4096]");
      } else if (key == "nb") {
        if (!small_int(v, 1, 64, p.num_beams)) return bad(f + " must be in [1, 64]");
      } else if (key == "lp") {
        if (!number(v, p.length_penalty) || !std::isfinite(p.length_penalty))
          return bad(f + " must be a finite number");
      } else if (key == "min") {
        if (!small_int(v, 0, 4096, p.min_new_tokens)) return bad(f + " must be in [0, 4096]");
      } else if (key == "rs") {
        if (v.type != msgpack::type::BOOLEAN) return bad(f + " must be a boolean");
        p.return_scores = v.via.boolean;
      } else if (key == "pr") {
        // The batcher checks it against its priority_levels (a gateway may be configured apart).
        if (!small_int(v, 0, 1024, p.priority)) return bad(f + " must be in [0, 1024]");
      } else {
        return bad("unknown field '" + f + "'");
      }
    }
    return std::nullopt;
  }

  const Limits& limits_;
};

}  // namespace

std::string_view kind_name(MessageKind kind) {
  return kKindNames[static_cast<size_t>(kind)];
}

std::string encode(const StageMessage& m) {
  msgpack::sbuffer buf;
  Packer pk(&buf);
  pk.pack_map(4);
  pack_str(pk, "v"), pk.pack_int(kVersion);
  pack_str(pk, "kind"), pack_str(pk, kind_name(m.kind));
  pack_str(pk, "credits"), pk.pack_int32(m.credits);
  pack_str(pk, "items");
  pk.pack_array(static_cast<uint32_t>(m.items.size()));
  for (const WorkItem& w : m.items) pack_item(buf, pk, w);
  return std::string(buf.data(), buf.size());
}

std::variant<StageMessage, Error> decode(std::span<const uint8_t> bytes, const Limits& limits) {
  if (bytes.size() > limits.max_message_bytes) {
    return Error{ErrorCode::kTooLong, "stage message: " + std::to_string(bytes.size()) +
                                          " bytes, limit " +
                                          std::to_string(limits.max_message_bytes)};
  }
  // Limits sized so a header cannot make the unpacker reserve much more than the frame holds.
  const msgpack::unpack_limit unpack_limits(
      /*array=*/std::max(limits.max_items, limits.max_ids), /*map=*/32,
      /*str=*/limits.max_text_bytes,
      /*bin=*/limits.max_hidden_bytes, /*ext=*/0, /*depth=*/6);
  msgpack::object_handle handle;
  try {
    size_t offset = 0;
    handle = msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size(), offset,
                             nullptr, nullptr, unpack_limits);
    if (offset != bytes.size())
      return Error{ErrorCode::kInvalidArgument, "stage message: trailing bytes"};
  } catch (const std::exception& e) {
    return Error{ErrorCode::kInvalidArgument,
                 std::string("stage message: not valid msgpack within limits (") + e.what() + ")"};
  }
  StageMessage out;
  Reader reader(limits);
  if (auto error = reader.message(handle.get(), out)) return *error;
  return out;
}

}  // namespace seqpipe::stage
