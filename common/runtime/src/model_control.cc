#include "seqpipe/runtime/model_control.h"

#include <filesystem>

namespace seqpipe::model_control {

std::optional<InFlight> send_catalog(zmq::context_t& context, const std::string& endpoint,
                                     const std::vector<CatalogEntry>& catalog,
                                     std::chrono::milliseconds wait,
                                     const transport::CurveKeys& curve) {
  transport::SocketOptions options;
  options.curve = curve;
  transport::Socket socket(context, zmq::socket_type::dealer, options);
  socket.connect(endpoint);
  const std::string bytes = encode_catalog(catalog);
  if (!socket.send({kCatalogCommand, std::string_view(bytes)}, true)) return std::nullopt;
  const auto reply = socket.recv(wait);
  if (!reply || reply->size() != 1) return std::nullopt;
  return decode_in_flight(reply->front());
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
