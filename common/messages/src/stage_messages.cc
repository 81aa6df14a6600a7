#include "seqpipe/messages/stage_messages.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <msgpack.hpp>

#include "seqpipe/generation/limits.h"
#include "seqpipe/protocol/msgpack_io.h"

namespace seqpipe::stage {

// Encoder rows travel as their float32 bytes, as this host holds them (in tensor frames).
static_assert(std::endian::native == std::endian::little,
              "stage messages carry little-endian floats");

namespace {

using protocol::Error;
using protocol::ErrorCode;

constexpr std::string_view kKindNames[] = {"ready",       "credit",  "tokenize", "sequence",
                                           "encode",      "encoded", "decode",   "decoded",
                                           "postprocess", "result",  "cancel",   "heartbeat"};
static_assert(std::size(kKindNames) == std::variant_size_v<StageMessage>);

// Beam search's other hypotheses a decoder returns at most.
constexpr uint32_t kMaxAlternatives = generation::kMaxBeams - 1;
// Bounds of the generation parameters an item may carry: the gateway checked the client's against
// its configuration, and these keep a peer's message within what the engine takes. Priority
// levels are checked by the batcher against its own (a gateway may be configured apart).
constexpr int kMaxPriorityLevels = 1024;
constexpr msgpack_io::ParamBounds kParamBounds{generation::kMaxNewTokens, generation::kMaxBeams,
                                               kMaxPriorityLevels};
// Longest gateway or batcher endpoint an item may name.
constexpr size_t kMaxEndpointBytes = 256;

// --- Reading ----------------------------------------------------------------------------------

// Which top-level fields a message type has.
template <class M>
constexpr bool kHasCredits = std::is_same_v<M, Ready> || std::is_same_v<M, Credit> ||
                             std::is_same_v<M, Encoded> || std::is_same_v<M, Decoded>;
template <class M>
constexpr bool kHasItems =
    !std::is_same_v<M, Ready> && !std::is_same_v<M, Credit> && !std::is_same_v<M, Heartbeat>;

// Reads one decoded msgpack object tree into a StageMessage, checking every field.
class Reader {
 public:
  Reader(const Limits& limits, std::span<const TensorFrame> frames)
      : limits_(limits), frames_(frames) {}

  // Every tensor frame was taken by an item.
  std::optional<Error> all_frames_read() const {
    if (next_frame_ == frames_.size()) return std::nullopt;
    return bad(std::to_string(frames_.size()) + " tensor frames for " +
               std::to_string(next_frame_) + " encoded items");
  }

  std::optional<Error> message(const msgpack::object& o, StageMessage& out) {
    if (o.type != msgpack::type::MAP) return bad("message is not a map");
    const msgpack::object *v = nullptr, *kind = nullptr, *credits = nullptr, *items = nullptr,
                          *from = nullptr, *incarnation = nullptr, *model = nullptr;
    const msgpack_io::NamedSlot fields[] = {
        {"v", &v},         {"kind", &kind}, {"credits", &credits},
        {"items", &items}, {"from", &from}, {"incarnation", &incarnation},
        {"model", &model}};
    std::optional<std::string> unknown;
    if (auto e = msgpack_io::collect_fields(o.via.map, "", fields, unknown)) return prefixed(*e);
    if (unknown) return bad("unknown field " + *unknown);
    if (!v) return bad("v is missing");
    int64_t version = 0;
    if (!integer(*v, version) || version != kVersion)
      return bad("v must be " + std::to_string(kVersion));
    if (!kind) return bad("kind is missing");
    std::string_view name;
    if (!str(*kind, name)) return bad("kind must be a string");
    size_t n = 0;
    while (n < std::size(kKindNames) && kKindNames[n] != name) ++n;
    if (n == std::size(kKindNames)) return bad("unknown kind '" + std::string(name) + "'");
    out = make(n);
    if (model) {
      auto* ready = std::get_if<Ready>(&out);
      if (!ready) return bad("a '" + std::string(name) + "' message has no field 'model'");
      if (auto e = model_name(*model, "model", ready->model)) return e;
    }
    return std::visit([&](auto& m) { return body(m, name, credits, items, from, incarnation); },
                      out);
  }

 private:
  // The default-constructed alternative number `n`.
  template <size_t... I>
  static StageMessage make(size_t n, std::index_sequence<I...>) {
    StageMessage m;
    ((n == I ? (m.template emplace<I>(), 0) : 0), ...);
    return m;
  }
  static StageMessage make(size_t n) {
    return make(n, std::make_index_sequence<std::variant_size_v<StageMessage>>());
  }

  template <class M>
  std::optional<Error> body(M& m, std::string_view name, const msgpack::object* credits,
                            const msgpack::object* items, const msgpack::object* from,
                            const msgpack::object* incarnation) {
    auto not_of = [&](std::string_view field) {
      return bad("a '" + std::string(name) + "' message has no field '" + std::string(field) + "'");
    };
    if (credits) {
      if constexpr (kHasCredits<M>) {
        int64_t c = 0;
        if (!integer(*credits, c) || c < 0 || c > 1'000'000)
          return bad("credits must be an integer in [0, 1000000]");
        m.credits = static_cast<int32_t>(c);
      } else {
        return not_of("credits");
      }
    }
    if (items) {
      if constexpr (std::is_same_v<M, Cancel>) {
        return read_items(*items, m.requests);
      } else if constexpr (kHasItems<M>) {
        return read_items(*items, m.items);
      } else {
        return not_of("items");
      }
    }
    if (from) {
      if constexpr (std::is_same_v<M, Heartbeat>) {
        std::string_view s;
        if (!str(*from, s) || s.size() > kMaxEndpointBytes)
          return bad("from must be a string of at most 256 bytes");
        m.from = s;
      } else {
        return not_of("from");
      }
    }
    if (incarnation) {
      if constexpr (std::is_same_v<M, Heartbeat>) {
        if (!unsigned_integer(*incarnation, m.incarnation))
          return bad("incarnation must be an unsigned integer");
      } else {
        return not_of("incarnation");
      }
    }
    return std::nullopt;
  }

  static Error bad(std::string message) {
    return {ErrorCode::kInvalidArgument, "stage message: " + std::move(message)};
  }
  static Error prefixed(Error e) {
    e.message = "stage message: " + e.message;
    return e;
  }

  static bool str(const msgpack::object& o, std::string_view& out) {
    if (o.type != msgpack::type::STR) return false;
    out = msgpack_io::as_string_view(o);
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
  static std::optional<Error> endpoint(const msgpack::object& v, const std::string& field,
                                       std::string& out) {
    std::string_view s;
    if (!str(v, s) || s.size() > kMaxEndpointBytes)
      return bad(field + " must be a string of at most 256 bytes");
    out = s;
    return std::nullopt;
  }
  std::optional<Error> text(const msgpack::object& v, const std::string& field,
                            std::string& out) const {
    std::string_view s;
    if (!str(v, s) || s.size() > limits_.max_text_bytes)
      return bad(field + " must be a string within the size limit");
    out = s;
    return std::nullopt;
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
  // At most `max` arrays of token ids (stop strings, beam hypotheses).
  std::optional<Error> id_arrays(const msgpack::object& v, const std::string& field, size_t max,
                                 std::vector<std::vector<int32_t>>& out) const {
    if (v.type != msgpack::type::ARRAY || v.via.array.size > max)
      return bad(field + " must be an array of at most " + std::to_string(max) + " id arrays");
    out.resize(v.via.array.size);
    for (uint32_t k = 0; k < v.via.array.size; ++k) {
      if (auto e = token_ids(v.via.array.ptr[k], field + "[" + std::to_string(k) + "]", out[k]))
        return e;
    }
    return std::nullopt;
  }
  static std::optional<Error> timings(const msgpack::object& v, const std::string& field,
                                      StageTimings& t) {
    if (v.type != msgpack::type::ARRAY || v.via.array.size != 6)
      return bad(field + " must be an array of 6 integers");
    uint64_t* slots[6] = {&t.queue_us,  &t.tokenize_us, &t.batch_wait_us,
                          &t.encode_us, &t.decode_us,   &t.postprocess_us};
    for (int k = 0; k < 6; ++k) {
      if (!unsigned_integer(v.via.array.ptr[k], *slots[k]))
        return bad(field + " must be an array of 6 integers");
    }
    return std::nullopt;
  }
  static std::optional<Error> score(const msgpack::object& v, const std::string& field,
                                    float& out) {
    // NaN would reach clients as a score and never compares equal (found by tests/fuzz).
    if (auto e = msgpack_io::read_float(v, field, true, out)) return prefixed(std::move(*e));
    return std::nullopt;
  }
  static std::optional<Error> request_id(const msgpack::object& v, const std::string& field,
                                         uint64_t& out) {
    if (!unsigned_integer(v, out)) return bad(field + " must be an unsigned integer");
    return std::nullopt;
  }
  static std::optional<Error> index(const msgpack::object& v, const std::string& field,
                                    uint32_t& out) {
    uint64_t idx = 0;
    if (!unsigned_integer(v, idx) || idx > std::numeric_limits<uint32_t>::max())
      return bad(field + " must be a uint32");
    out = static_cast<uint32_t>(idx);
    return std::nullopt;
  }
  static std::optional<Error> flag(const msgpack::object& v, const std::string& field, bool& out) {
    if (v.type != msgpack::type::BOOLEAN) return bad(field + " must be a boolean");
    out = v.via.boolean;
    return std::nullopt;
  }
  static std::optional<Error> count(const msgpack::object& v, const std::string& field,
                                    uint32_t& out) {
    uint64_t n = 0;
    if (!unsigned_integer(v, n) || n > std::numeric_limits<uint32_t>::max())
      return bad(field + " must be a uint32");
    out = static_cast<uint32_t>(n);
    return std::nullopt;
  }
  static std::optional<Error> finish_reason(const msgpack::object& v, const std::string& field,
                                            protocol::FinishReason& out) {
    std::string_view name;
    const auto reason = str(v, name) ? protocol::parse_finish_reason(name) : std::nullopt;
    if (!reason) return bad(field + " must be \"eos\", \"length\" or \"stop\"");
    out = *reason;
    return std::nullopt;
  }
  // A model version's key: "name/version" (config::model_key), bounded like an endpoint.
  static std::optional<Error> model_name(const msgpack::object& v, const std::string& field,
                                         std::string& out) {
    std::string_view s;
    if (!str(v, s) || s.empty() || s.size() > kMaxEndpointBytes)
      return bad(field + " must be a string of 1 to 256 bytes");
    out = s;
    return std::nullopt;
  }
  static std::optional<Error> deadline(const msgpack::object& v, const std::string& field,
                                       Deadline& out) {
    int64_t unix_us = 0;
    if (!integer(v, unix_us)) return bad(field + " must be an integer");
    out = Deadline::at_unix_us(unix_us);
    return std::nullopt;
  }

  // One field of an item: `known` is set when `key` is a field of the item's type.
  std::optional<Error> field(std::string_view key, const msgpack::object& v, const std::string& f,
                             WorkHeader& w, bool& known) const {
    known = true;
    if (key == "r") return request_id(v, f, w.request);
    if (key == "i") return index(v, f, w.index);
    if (key == "g") return endpoint(v, f, w.gateway);
    if (key == "dl") return deadline(v, f, w.deadline);
    if (key == "tm") return timings(v, f, w.timings);
    if (key == "st") return flag(v, f, w.stream);
    if (key == "sid") return id_arrays(v, f, generation::kMaxStopSequences, w.stop_ids);
    if (key == "pn") return count(v, f, w.prompt_tokens);
    if (key == "m") return model_name(v, f, w.model);
    if (key == "p") {
      if (auto e = msgpack_io::read_params(v, kParamBounds, w.params)) {
        return bad(f + ": " + e->message);
      }
      return std::nullopt;
    }
    known = false;
    return std::nullopt;
  }
  std::optional<Error> field(std::string_view key, const msgpack::object& v, const std::string& f,
                             TextItem& w, bool& known) const {
    known = true;
    if (key == "t") return text(v, f, w.text);
    if (key == "b") return endpoint(v, f, w.batcher);
    return field(key, v, f, static_cast<WorkHeader&>(w), known);
  }
  std::optional<Error> field(std::string_view key, const msgpack::object& v, const std::string& f,
                             SequenceItem& w, bool& known) const {
    known = true;
    if (key == "ids") return token_ids(v, f, w.ids);
    if (key == "t") return text(v, f, w.text);
    return field(key, v, f, static_cast<WorkHeader&>(w), known);
  }
  std::optional<Error> field(std::string_view key, const msgpack::object& v, const std::string& f,
                             EncodedItem& w, bool& known) const {
    known = true;
    if (key == "rows") {
      if (!integer(v, w.hidden.rows) || w.hidden.rows < 0)
        return bad(f + " must be a non-negative integer");
      return std::nullopt;
    }
    if (key == "t") return text(v, f, w.text);
    return field(key, v, f, static_cast<WorkHeader&>(w), known);
  }
  std::optional<Error> field(std::string_view key, const msgpack::object& v, const std::string& f,
                             DecodedItem& w, bool& known) const {
    known = true;
    if (key == "ids") return token_ids(v, f, w.ids);
    if (key == "s") return score(v, f, w.score);
    if (key == "t") return text(v, f, w.text);
    if (key == "alt") return id_arrays(v, f, kMaxAlternatives, w.alternatives);
    if (key == "alt_s") return scores(v, f, w.alternative_scores);
    if (key == "pt") return flag(v, f, w.partial);
    if (key == "fr") return finish_reason(v, f, w.finish_reason);
    return field(key, v, f, static_cast<WorkHeader&>(w), known);
  }
  static std::optional<Error> scores(const msgpack::object& v, const std::string& f,
                                     std::vector<float>& out) {
    if (v.type != msgpack::type::ARRAY || v.via.array.size > kMaxAlternatives) {
      return bad(f + " must be an array of at most " + std::to_string(kMaxAlternatives) +
                 " scores");
    }
    out.resize(v.via.array.size);
    for (uint32_t k = 0; k < v.via.array.size; ++k) {
      if (auto e = score(v.via.array.ptr[k], f + "[" + std::to_string(k) + "]", out[k])) return e;
    }
    return std::nullopt;
  }
  std::optional<Error> field(std::string_view key, const msgpack::object& v, const std::string& f,
                             ResultItem& w, bool& known) const {
    known = true;
    if (key == "r") return request_id(v, f, w.request);
    if (key == "i") return index(v, f, w.index);
    if (key == "t") return text(v, f, w.text);
    if (key == "s") return score(v, f, w.score);
    if (key == "tm") return timings(v, f, w.timings);
    if (key == "pt") return flag(v, f, w.partial);
    if (key == "pn") return count(v, f, w.prompt_tokens);
    if (key == "cn") return count(v, f, w.completion_tokens);
    if (key == "fr") return finish_reason(v, f, w.finish_reason);
    if (key == "alt_s") return scores(v, f, w.alternative_scores);
    if (key == "alt") {
      if (v.type != msgpack::type::ARRAY || v.via.array.size > kMaxAlternatives) {
        return bad(f + " must be an array of at most " + std::to_string(kMaxAlternatives) +
                   " texts");
      }
      w.alternatives.resize(v.via.array.size);
      for (uint32_t k = 0; k < v.via.array.size; ++k) {
        if (auto e = text(v.via.array.ptr[k], f + "[" + std::to_string(k) + "]", w.alternatives[k]))
          return e;
      }
      return std::nullopt;
    }
    if (key == "e") {
      if (v.type != msgpack::type::MAP || v.via.map.size != 2) return bad(f + " must be {c, m}");
      Error err;
      for (uint32_t k = 0; k < 2; ++k) {
        std::string_view ek, ev;
        if (!str(v.via.map.ptr[k].key, ek) || !str(v.via.map.ptr[k].val, ev))
          return bad(f + " must be {c, m}");
        if (ek == "c") {
          auto code = protocol::parse_error_code(ev);
          if (!code) return bad(f + ".c is not an error code");
          err.code = *code;
        } else if (ek == "m") {
          err.message = ev;
        } else {
          return bad(f + " must be {c, m}");
        }
      }
      w.error = err;
      return std::nullopt;
    }
    known = false;
    return std::nullopt;
  }
  std::optional<Error> field(std::string_view key, const msgpack::object& v, const std::string& f,
                             RequestRef& w, bool& known) const {
    known = true;
    if (key == "r") return request_id(v, f, w.request);
    if (key == "g") return endpoint(v, f, w.gateway);
    if (key == "dl") return deadline(v, f, w.deadline);
    known = false;
    return std::nullopt;
  }

  // Checks across an item's fields, after all were read.
  static std::optional<Error> whole(const std::string&, const WorkHeader&) { return std::nullopt; }
  static std::optional<Error> whole(const std::string& at, const ResultItem& w) {
    if (w.alternative_scores.size() != w.alternatives.size())
      return bad(at + ".alt_s must hold one score per text in .alt");
    return std::nullopt;
  }
  static std::optional<Error> whole(const std::string&, const RequestRef&) { return std::nullopt; }
  static std::optional<Error> whole(const std::string& at, const DecodedItem& w) {
    if (!w.alternative_scores.empty() && w.alternative_scores.size() != w.alternatives.size())
      return bad(at + ".alt_s must hold one score per alternative in .alt");
    return std::nullopt;
  }
  // An encoded item's hidden rows are the next tensor frame; only its size is looked at here.
  std::optional<Error> whole(const std::string& at, EncodedItem& w) {
    if (next_frame_ == frames_.size())
      return bad(at + " has no tensor frame (" + std::to_string(frames_.size()) + " sent)");
    w.hidden.values = frames_[next_frame_++];
    if (w.hidden.values.bytes().size() > limits_.max_hidden_bytes)
      return bad(at + ": its tensor frame is over the size limit");
    return std::nullopt;
  }

  template <class Item>
  std::optional<Error> read_items(const msgpack::object& v, std::vector<Item>& out) {
    if (v.type != msgpack::type::ARRAY) return bad("items must be an array");
    if (v.via.array.size > limits_.max_items)
      return bad("more than " + std::to_string(limits_.max_items) + " items");
    out.resize(v.via.array.size);
    for (uint32_t n = 0; n < v.via.array.size; ++n) {
      const std::string at = "items[" + std::to_string(n) + "]";
      const msgpack::object& o = v.via.array.ptr[n];
      if (o.type != msgpack::type::MAP) return bad(at + " is not a map");
      bool have_r = false;
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        const auto& kv = o.via.map.ptr[i];
        std::string_view key;
        if (!str(kv.key, key)) return bad(at + ": a key is not a string");
        const std::string f = at + "." + std::string(key);
        bool known = false;
        if (auto e = field(key, kv.val, f, out[n], known)) return e;
        if (!known) return bad("unknown field '" + f + "'");
        have_r = have_r || key == "r";
      }
      if (!have_r) return bad(at + ".r is missing");
      if (auto e = whole(at, out[n])) return e;
    }
    return std::nullopt;
  }

  const Limits& limits_;
  std::span<const TensorFrame> frames_;
  size_t next_frame_ = 0;
};

}  // namespace

bool TensorFrame::operator==(const TensorFrame& other) const {
  return bytes_.size() == other.bytes_.size() &&
         (bytes_.empty() || std::memcmp(bytes_.data(), other.bytes_.data(), bytes_.size()) == 0);
}

std::string_view kind_name(MessageKind kind) {
  return kKindNames[static_cast<size_t>(kind)];
}

ResultItem failed(const WorkHeader& item, protocol::Error error) {
  ResultItem result;
  result.request = item.request;
  result.index = item.index;
  result.timings = item.timings;
  result.error = std::move(error);
  return result;
}

std::variant<StageMessage, Error> decode(std::span<const uint8_t> bytes,
                                         std::span<const TensorFrame> frames,
                                         const Limits& limits) {
  if (bytes.size() > limits.max_message_bytes) {
    return Error{ErrorCode::kTooLong, "stage message: " + std::to_string(bytes.size()) +
                                          " bytes, limit " +
                                          std::to_string(limits.max_message_bytes)};
  }
  // Limits sized so a header cannot make the unpacker reserve much more than the frame holds.
  const msgpack::unpack_limit unpack_limits(
      /*array=*/std::max(limits.max_items, limits.max_ids), /*map=*/32,
      /*str=*/limits.max_text_bytes,
      /*bin=*/0, /*ext=*/0, /*depth=*/6);
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
  Reader reader(limits, frames);
  if (auto error = reader.message(handle.get(), out)) return *error;
  if (auto error = reader.all_frames_read()) return *error;
  return out;
}

}  // namespace seqpipe::stage
