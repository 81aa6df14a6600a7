#include "seqpipe/runtime/model_control.h"

#include <algorithm>
#include <filesystem>
#include <msgpack.hpp>
#include <tuple>

#include "seqpipe/protocol/msgpack_io.h"

namespace seqpipe::model_control {
namespace {

using Map = std::map<std::string, msgpack::object>;

// Limits before parsing, as status::decode's: a few bytes claiming a huge array allocate nothing.
msgpack::object_handle unpack(std::string_view bytes) {
  if (bytes.size() > 1024 * 1024) throw std::runtime_error("too large");
  const msgpack::unpack_limit limits(/*array=*/4096, /*map=*/4096, /*str=*/4096, /*bin=*/0,
                                     /*ext=*/0, /*depth=*/4);
  return msgpack::unpack(bytes.data(), bytes.size(), nullptr, nullptr, limits);
}

template <typename T>
std::optional<T> field(const Map& map, const char* key) {
  const auto it = map.find(key);
  if (it == map.end() || it->second.is_nil()) return std::nullopt;
  return it->second.as<T>();
}

constexpr std::pair<Op, std::string_view> kOps[] = {
    {Op::kIndex, "index"}, {Op::kLoad, "load"}, {Op::kUnload, "unload"}};
constexpr std::pair<State, std::string_view> kStates[] = {{State::kLoading, "LOADING"},
                                                          {State::kReady, "READY"},
                                                          {State::kUnloading, "UNLOADING"},
                                                          {State::kUnavailable, "UNAVAILABLE"}};

}  // namespace

std::string encode_catalog(const std::vector<config::ModelVersion>& models) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  out.array(models.size());
  for (const auto& m : models) out.array(3), out.str(m.name), out.i64(m.version), out.str(m.dir);
  return bytes;
}

std::optional<std::vector<config::ModelVersion>> decode_catalog(std::string_view bytes) {
  try {
    const auto handle = unpack(bytes);
    std::vector<config::ModelVersion> models;
    for (const auto& [name, version, dir] :
         handle.get().as<std::vector<std::tuple<std::string, int, std::string>>>()) {
      if (!config::valid_model_name(name) || version < 0) return std::nullopt;
      models.push_back({name, version, dir});
    }
    return models;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string encode_in_flight(const InFlight& in_flight) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  out.map(in_flight.size());
  for (const auto& [key, n] : in_flight) out.str(key), out.i64(n);
  return bytes;
}

std::optional<InFlight> decode_in_flight(std::string_view bytes) {
  try {
    return unpack(bytes).get().as<InFlight>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<InFlight> send_catalog(zmq::context_t& context, const std::string& endpoint,
                                     const std::vector<config::ModelVersion>& models,
                                     std::chrono::milliseconds wait,
                                     const transport::CurveKeys& curve) {
  transport::SocketOptions options;
  options.curve = curve;
  transport::Socket socket(context, zmq::socket_type::dealer, options);
  socket.connect(endpoint);
  const std::string catalog = encode_catalog(models);
  if (!socket.send({kCatalogCommand, std::string_view(catalog)}, true)) return std::nullopt;
  const auto reply = socket.recv(wait);
  if (!reply || reply->size() != 1) return std::nullopt;
  return decode_in_flight(reply->front());
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
  try {
    const auto handle = unpack(bytes);
    const Map map = handle.get().as<Map>();
    ControlRequest request;
    const std::string op = field<std::string>(map, "op").value_or("");
    bool known = false;
    for (const auto& [o, name] : kOps)
      if (name == op) request.op = o, known = true;
    if (!known) return "unknown op '" + op + "' (index, load, unload)";
    request.name = field<std::string>(map, "name").value_or("");
    request.version = field<int>(map, "version");
    if (request.op != Op::kIndex && !config::valid_model_name(request.name))
      return "'" + request.name + "' is not a model name";
    return request;
  } catch (const std::exception& e) {
    return std::string("not a control request: ") + e.what();
  }
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
  try {
    const auto handle = unpack(bytes);
    const Map map = handle.get().as<Map>();
    ControlReply reply;
    if (const auto code = field<std::string>(map, "error")) {
      reply.error = protocol::Error{
          protocol::parse_error_code(*code).value_or(protocol::ErrorCode::kInternal),
          field<std::string>(map, "message").value_or("")};
    }
    for (const Map& m : field<std::vector<Map>>(map, "models").value_or(std::vector<Map>{})) {
      ModelEntry e{field<std::string>(m, "name").value_or(""), field<int>(m, "version").value_or(0),
                   State::kUnavailable, field<std::string>(m, "reason").value_or("")};
      const std::string state = field<std::string>(m, "state").value_or("");
      for (const auto& [s, name] : kStates)
        if (name == state) e.state = s;
      reply.models.push_back(std::move(e));
    }
    reply.more = static_cast<size_t>(std::max<int64_t>(0, field<int64_t>(map, "more").value_or(0)));
    return reply;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

ControlReply ask_supervisor(zmq::context_t& context, const std::string& endpoint,
                            const ControlRequest& request, std::chrono::milliseconds wait) {
  const auto unavailable = [&](const std::string& why) {
    return ControlReply{
        protocol::Error{protocol::ErrorCode::kUnavailable,
                        "no answer from the supervisor (seqpipe up) on " + endpoint + ": " + why},
        {}};
  };
  // An ipc socket file that is not there: no `seqpipe up --repository` on this runtime dir. Said
  // at once, rather than after the wait (a load's is minutes).
  if (std::error_code ec;
      endpoint.starts_with("ipc://") && !std::filesystem::exists(endpoint.substr(6), ec)) {
    return unavailable(
        "no such socket (is `seqpipe up --repository` running on this runtime dir?)");
  }
  transport::Socket socket(context, zmq::socket_type::dealer, {});
  socket.connect(endpoint);
  const std::string bytes = encode(request);
  if (!socket.send({std::string_view(), std::string_view(bytes)}, true))
    return unavailable("could not send");
  const auto reply = socket.recv(wait);
  if (!reply || reply->size() != 2) return unavailable("none within the wait");
  if (auto decoded = decode_reply(reply->back())) return *decoded;
  return unavailable("not a control reply");
}

}  // namespace seqpipe::model_control
