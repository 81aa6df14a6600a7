#include "seqpipe/control/model_control.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <msgpack.hpp>
#include <span>

#include "seqpipe/config/config.h"
#include "seqpipe/protocol/msgpack_io.h"

namespace seqpipe::model_control {
namespace {

using protocol::Error;
using protocol::ErrorCode;

constexpr std::pair<Op, std::string_view> kOps[] = {
    {Op::kIndex, "index"}, {Op::kLoad, "load"}, {Op::kUnload, "unload"}};
constexpr std::pair<State, std::string_view> kStates[] = {{State::kLoading, "LOADING"},
                                                          {State::kReady, "READY"},
                                                          {State::kUnloading, "UNLOADING"},
                                                          {State::kUnavailable, "UNAVAILABLE"}};
constexpr int64_t kIntMin = std::numeric_limits<int>::min();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// Limits before parsing, as status::decode's: a few bytes claiming a huge array allocate nothing.
std::optional<Error> unpack(std::string_view bytes, msgpack::object_handle& out) {
  if (bytes.size() > 1024 * 1024) return Error{ErrorCode::kTooLong, "message over 1 MiB"};
  const msgpack::unpack_limit limits(/*array=*/4096, /*map=*/4096, /*str=*/4096, /*bin=*/0,
                                     /*ext=*/0, /*depth=*/4);
  const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return msgpack_io::unpack_one(data, limits, out);
}

// The named fields of a map (`fields`: name and slot pairs); fields of a newer peer are ignored.
std::optional<Error> fields_of(const msgpack::object& value,
                               std::span<const msgpack_io::NamedSlot> fields) {
  if (value.type != msgpack::type::MAP) return Error{ErrorCode::kInvalidArgument, "not a map"};
  std::optional<std::string> newer;
  return msgpack_io::collect_fields(value.via.map, "", fields, newer);
}

// An optional field: absent or nil leaves `out` as it is.
bool absent(const msgpack::object* value) {
  return value == nullptr || value->type == msgpack::type::NIL;
}
std::optional<Error> read_string(const msgpack::object* value, std::string_view path,
                                 std::string& out) {
  if (absent(value)) return std::nullopt;
  std::string_view text;
  if (auto e = msgpack_io::read_str(*value, path, text)) return e;
  out = std::string(text);
  return std::nullopt;
}
template <typename Int>
std::optional<Error> read_number(const msgpack::object* value, std::string_view path, int64_t lo,
                                 int64_t hi, Int& out) {
  if (absent(value)) return std::nullopt;
  int64_t n = 0;
  if (auto e = msgpack_io::read_int(*value, path, lo, hi, n)) return e;
  out = static_cast<Int>(n);
  return std::nullopt;
}

std::optional<Error> read_entry(const msgpack::object& value, ModelEntry& e) {
  const msgpack::object *name = nullptr, *version = nullptr, *state = nullptr, *reason = nullptr;
  const msgpack_io::NamedSlot fields[] = {
      {"name", &name}, {"version", &version}, {"state", &state}, {"reason", &reason}};
  std::string state_text;
  if (auto e1 = fields_of(value, fields)) return e1;
  if (auto e1 = read_string(name, "models[].name", e.name)) return e1;
  if (auto e1 = read_number(version, "models[].version", kIntMin, kIntMax, e.version)) return e1;
  if (auto e1 = read_string(state, "models[].state", state_text)) return e1;
  if (auto e1 = read_string(reason, "models[].reason", e.reason)) return e1;
  e.state = State::kUnavailable;
  for (const auto& [s, text] : kStates)
    if (text == state_text) e.state = s;
  return std::nullopt;
}

std::optional<Error> read_reply(const msgpack::object& root, ControlReply& reply) {
  const msgpack::object *error = nullptr, *message = nullptr, *models = nullptr, *more = nullptr;
  const msgpack_io::NamedSlot fields[] = {
      {"error", &error}, {"message", &message}, {"models", &models}, {"more", &more}};
  if (auto e = fields_of(root, fields)) return e;
  if (!absent(error)) {
    std::string code, text;
    if (auto e = read_string(error, "error", code)) return e;
    if (auto e = read_string(message, "message", text)) return e;
    reply.error = Error{protocol::parse_error_code(code).value_or(ErrorCode::kInternal), text};
  }
  if (!absent(models)) {
    if (models->type != msgpack::type::ARRAY)
      return Error{ErrorCode::kInvalidArgument, "models must be an array"};
    reply.models.resize(models->via.array.size);
    for (uint32_t i = 0; i < models->via.array.size; ++i)
      if (auto e = read_entry(models->via.array.ptr[i], reply.models[i])) return e;
  }
  // A negative count from a peer reads as none left out.
  int64_t left_out = 0;
  if (auto e = read_number(more, "more", std::numeric_limits<int64_t>::min(),
                           std::numeric_limits<int64_t>::max(), left_out))
    return e;
  reply.more = static_cast<size_t>(std::max<int64_t>(0, left_out));
  return std::nullopt;
}

}  // namespace

protocol::Limits protocol_limits(const config::PipelineConfig& c) {
  protocol::Limits limits;
  limits.max_message_bytes = c.gateway.max_message_bytes;
  limits.max_texts = c.gateway.max_texts;
  limits.max_text_bytes = c.gateway.max_text_bytes;
  limits.max_new_tokens_cap = c.decoder.max_new_tokens;
  limits.max_beams = std::min(c.decoder.max_beams, c.decoder.num_slots);
  limits.max_timeout_ms = c.gateway.max_timeout_ms;
  limits.priority_levels = c.batcher.priority_levels;
  return limits;
}

VersionSettings version_settings(const config::PipelineConfig& c) {
  return {protocol_limits(c), static_cast<size_t>(c.gateway.split_words), ""};
}

VersionSettings load_version_settings(const VersionConfig& version_config,
                                      const config::ModelVersion& version) {
  try {
    return version_settings(version_config(version));
  } catch (const std::exception& e) {
    VersionSettings settings;
    settings.not_loaded = e.what();
    return settings;
  }
}

bool VersionSettings::operator==(const VersionSettings& o) const {
  const protocol::Limits &a = limits, &b = o.limits;
  return a.max_message_bytes == b.max_message_bytes && a.max_texts == b.max_texts &&
         a.max_text_bytes == b.max_text_bytes && a.max_id_bytes == b.max_id_bytes &&
         a.max_new_tokens_cap == b.max_new_tokens_cap && a.max_beams == b.max_beams &&
         a.max_timeout_ms == b.max_timeout_ms && a.priority_levels == b.priority_levels &&
         split_words == o.split_words && not_loaded == o.not_loaded;
}

namespace {

constexpr int64_t kSizeMax = std::numeric_limits<int64_t>::max();

void write_settings(msgpack_io::Writer& out, const VersionSettings& s) {
  const protocol::Limits& l = s.limits;
  out.map(9);
  out.str("max_message_bytes"), out.u64(l.max_message_bytes);
  out.str("max_texts"), out.u64(l.max_texts);
  out.str("max_text_bytes"), out.u64(l.max_text_bytes);
  out.str("max_new_tokens"), out.i64(l.max_new_tokens_cap);
  out.str("max_beams"), out.i64(l.max_beams);
  out.str("max_timeout_ms"), out.u64(l.max_timeout_ms);
  out.str("priority_levels"), out.i64(l.priority_levels);
  out.str("split_words"), out.u64(s.split_words);
  out.str("not_loaded"), out.str(std::string_view(s.not_loaded).substr(0, kMaxReasonBytes));
}

// Every field is required: a catalog comes from the same build's supervisor.
std::optional<Error> read_settings(const msgpack::object& value, VersionSettings& s) {
  const msgpack::object *message = nullptr, *texts = nullptr, *text = nullptr, *tokens = nullptr,
                        *beams = nullptr, *timeout = nullptr, *priorities = nullptr,
                        *split = nullptr, *not_loaded = nullptr;
  const msgpack_io::NamedSlot fields[] = {
      {"max_message_bytes", &message},  {"max_texts", &texts},   {"max_text_bytes", &text},
      {"max_new_tokens", &tokens},      {"max_beams", &beams},   {"max_timeout_ms", &timeout},
      {"priority_levels", &priorities}, {"split_words", &split}, {"not_loaded", &not_loaded}};
  if (auto e = fields_of(value, fields)) return e;
  for (const msgpack::object* field :
       {message, texts, text, tokens, beams, timeout, priorities, split, not_loaded})
    if (absent(field)) return Error{ErrorCode::kInvalidArgument, "a version's settings cut short"};
  protocol::Limits& l = s.limits;
  std::optional<Error> e =
      read_number(message, "max_message_bytes", 0, kSizeMax, l.max_message_bytes);
  if (!e) e = read_number(texts, "max_texts", 0, kSizeMax, l.max_texts);
  if (!e) e = read_number(text, "max_text_bytes", 0, kSizeMax, l.max_text_bytes);
  if (!e) e = read_number(tokens, "max_new_tokens", 0, kIntMax, l.max_new_tokens_cap);
  if (!e) e = read_number(beams, "max_beams", 0, kIntMax, l.max_beams);
  if (!e)
    e = read_number(timeout, "max_timeout_ms", 0, std::numeric_limits<uint32_t>::max(),
                    l.max_timeout_ms);
  if (!e) e = read_number(priorities, "priority_levels", 0, kIntMax, l.priority_levels);
  if (!e) e = read_number(split, "split_words", 0, kSizeMax, s.split_words);
  if (!e) e = read_string(not_loaded, "not_loaded", s.not_loaded);
  return e;
}

}  // namespace

std::string encode_catalog(const std::vector<CatalogEntry>& catalog) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  out.array(catalog.size());
  for (const auto& [m, settings] : catalog) {
    out.array(4), out.str(m.name), out.i64(m.version), out.str(m.dir);
    write_settings(out, settings);
  }
  return bytes;
}

std::optional<std::vector<CatalogEntry>> decode_catalog(std::string_view bytes) {
  msgpack::object_handle handle;
  if (unpack(bytes, handle) || handle.get().type != msgpack::type::ARRAY) return std::nullopt;
  const msgpack::object_array& rows = handle.get().via.array;
  std::vector<CatalogEntry> catalog(rows.size);
  for (uint32_t i = 0; i < rows.size; ++i) {
    const msgpack::object& row = rows.ptr[i];
    if (row.type != msgpack::type::ARRAY || row.via.array.size != 4) return std::nullopt;
    config::ModelVersion& m = catalog[i].model;
    const msgpack::object* field = row.via.array.ptr;
    if (read_string(&field[0], "catalog[].name", m.name) ||
        read_number(&field[1], "catalog[].version", 0, kIntMax, m.version) ||
        read_string(&field[2], "catalog[].dir", m.dir) || !config::valid_model_name(m.name) ||
        read_settings(field[3], catalog[i].settings))
      return std::nullopt;
  }
  return catalog;
}

std::vector<config::ModelVersion> versions_of(const std::vector<CatalogEntry>& catalog) {
  std::vector<config::ModelVersion> versions;
  versions.reserve(catalog.size());
  for (const CatalogEntry& entry : catalog) versions.push_back(entry.model);
  return versions;
}

std::string encode_in_flight(const InFlight& in_flight) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  out.map(in_flight.size());
  for (const auto& [key, n] : in_flight) out.str(key), out.i64(n);
  return bytes;
}

std::optional<InFlight> decode_in_flight(std::string_view bytes) {
  msgpack::object_handle handle;
  if (unpack(bytes, handle) || handle.get().type != msgpack::type::MAP) return std::nullopt;
  InFlight in_flight;
  const msgpack::object_map& map = handle.get().via.map;
  for (uint32_t i = 0; i < map.size; ++i) {
    std::string key;
    int n = 0;
    if (absent(&map.ptr[i].key) || read_string(&map.ptr[i].key, "in_flight key", key) ||
        absent(&map.ptr[i].val) || read_number(&map.ptr[i].val, "in_flight", kIntMin, kIntMax, n))
      return std::nullopt;
    in_flight[key] = n;
  }
  return in_flight;
}

std::string_view state_name(State state) {
  for (const auto& [s, name] : kStates)
    if (s == state) return name;
  return "UNAVAILABLE";
}

std::string encode(const ControlRequest& request) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  out.map(3);
  out.str("op");
  for (const auto& [op, name] : kOps)
    if (op == request.op) out.str(name);
  out.str("name"), out.str(request.name);
  out.str("version");
  request.version ? out.i64(*request.version) : out.nil();
  return bytes;
}

std::variant<ControlRequest, std::string> decode_request(std::string_view bytes) {
  msgpack::object_handle handle;
  const msgpack::object *op = nullptr, *name = nullptr, *version = nullptr;
  const msgpack_io::NamedSlot fields[] = {{"op", &op}, {"name", &name}, {"version", &version}};
  std::optional<Error> error = unpack(bytes, handle);
  if (!error) error = fields_of(handle.get(), fields);
  std::string op_name;
  ControlRequest request;
  if (!error) error = read_string(op, "op", op_name);
  if (!error) error = read_string(name, "name", request.name);
  int number = 0;
  if (!error && !absent(version)) {
    error = read_number(version, "version", kIntMin, kIntMax, number);
    request.version = number;
  }
  if (error) return "not a control request: " + error->message;
  bool known = false;
  for (const auto& [o, text] : kOps)
    if (text == op_name) request.op = o, known = true;
  if (!known) return "unknown op '" + op_name + "' (index, load, unload)";
  if (request.op != Op::kIndex && !config::valid_model_name(request.name))
    return "'" + request.name + "' is not a model name";
  return request;
}

std::string encode(const ControlReply& reply) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  const size_t shown = std::min(reply.models.size(), kMaxIndexEntries);
  out.map(4);
  out.str("error");
  reply.error ? out.str(protocol::wire_name(reply.error->code)) : out.nil();
  out.str("message"), out.str(reply.error ? reply.error->message.substr(0, kMaxReasonBytes) : "");
  out.str("models");
  out.array(shown);
  for (size_t i = 0; i < shown; ++i) {
    const ModelEntry& m = reply.models[i];
    out.map(4);
    out.str("name"), out.str(m.name), out.str("version"), out.i64(m.version);
    out.str("state"), out.str(state_name(m.state));
    out.str("reason"), out.str(std::string_view(m.reason).substr(0, kMaxReasonBytes));
  }
  out.str("more"), out.i64(static_cast<int64_t>(reply.more + reply.models.size() - shown));
  return bytes;
}

std::optional<ControlReply> decode_reply(std::string_view bytes) {
  msgpack::object_handle handle;
  ControlReply reply;
  if (unpack(bytes, handle) || read_reply(handle.get(), reply)) return std::nullopt;
  return reply;
}

}  // namespace seqpipe::model_control
