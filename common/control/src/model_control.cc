#include "seqpipe/control/model_control.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <msgpack.hpp>
#include <span>

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

std::string encode_catalog(const std::vector<config::ModelVersion>& models) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  out.array(models.size());
  for (const auto& m : models) out.array(3), out.str(m.name), out.i64(m.version), out.str(m.dir);
  return bytes;
}

std::optional<std::vector<config::ModelVersion>> decode_catalog(std::string_view bytes) {
  msgpack::object_handle handle;
  if (unpack(bytes, handle) || handle.get().type != msgpack::type::ARRAY) return std::nullopt;
  const msgpack::object_array& rows = handle.get().via.array;
  std::vector<config::ModelVersion> models(rows.size);
  for (uint32_t i = 0; i < rows.size; ++i) {
    const msgpack::object& row = rows.ptr[i];
    if (row.type != msgpack::type::ARRAY || row.via.array.size != 3) return std::nullopt;
    config::ModelVersion& m = models[i];
    const msgpack::object* field = row.via.array.ptr;
    if (read_string(&field[0], "catalog[].name", m.name) ||
        read_number(&field[1], "catalog[].version", 0, kIntMax, m.version) ||
        read_string(&field[2], "catalog[].dir", m.dir) || !config::valid_model_name(m.name))
      return std::nullopt;
  }
  return models;
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
