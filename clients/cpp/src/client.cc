#include "seqpipe/client.h"

#include "seqpipe/common/transport.h"

namespace seqpipe::client {

struct Client::Impl {
  zmq::context_t context{1};
  transport::Socket socket{context, zmq::socket_type::dealer};
  uint64_t next_id = 1;

  std::string fresh_id() {
    std::string id = std::to_string(next_id++);
    id.insert(id.begin(), 'c');  // (not "c" + ...: GCC 12 warns -Wrestrict on it, wrongly)
    return id;
  }

  std::variant<protocol::Reply, protocol::Error> exchange(const std::string& payload,
                                                          const std::string* want_id,
                                                          std::chrono::milliseconds wait);
  // A DEALER sends an empty delimiter first, as REQ does, so the gateway sees one envelope shape.
  bool send(const std::string& payload) {
    return socket.send({std::string_view(), std::string_view(payload)});
  }
  std::variant<protocol::Reply, protocol::Error> await(const std::string* want_id,
                                                       std::chrono::milliseconds wait);
};

Client::Client(const std::string& endpoint) : impl_(std::make_unique<Impl>()) {
  impl_->socket.connect(endpoint);
}

Client::~Client() = default;

std::variant<protocol::Reply, protocol::Error> Client::call(const protocol::Request& request,
                                                            std::chrono::milliseconds wait) {
  // Every request carries an id so that a late reply to an earlier (timed-out) call is skipped.
  protocol::Request r = request;
  if (!r.id) r.id = impl_->fresh_id();
  return impl_->exchange(protocol::encode_request(r), &*r.id, wait);
}

std::optional<std::string> Client::submit(const protocol::Request& request) {
  if (request.id) {  // no copy: the load generator reuses one request
    if (!impl_->send(protocol::encode_request(request))) return std::nullopt;
    return *request.id;
  }
  protocol::Request r = request;
  if (!r.id) r.id = impl_->fresh_id();
  if (!impl_->send(protocol::encode_request(r))) return std::nullopt;
  return *r.id;
}

bool Client::cancel(const std::string& id) {
  protocol::Request cancel;
  cancel.op = protocol::Op::kCancel;
  cancel.id = id;
  return impl_->send(protocol::encode_request(cancel));
}

std::variant<protocol::Reply, protocol::Error> Client::receive(const std::string& id,
                                                               std::chrono::milliseconds wait) {
  return impl_->await(&id, wait);
}

std::variant<protocol::Reply, protocol::Error> Client::call_raw(const std::string& payload,
                                                                std::chrono::milliseconds wait) {
  return impl_->exchange(payload, nullptr, wait);
}

std::variant<protocol::Reply, protocol::Error> Client::Impl::exchange(
    const std::string& payload, const std::string* want_id, std::chrono::milliseconds wait) {
  if (!send(payload))
    return protocol::Error{protocol::ErrorCode::kUnavailable, "could not send the request"};
  return await(want_id, wait);
}

std::variant<protocol::Reply, protocol::Error> Client::Impl::await(const std::string* want_id,
                                                                   std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return protocol::Error{protocol::ErrorCode::kUnavailable,
                             "no reply from the gateway in time"};
    auto frames = socket.recv(left);
    if (!frames || frames->empty()) continue;
    const std::string& body = frames->back();
    auto reply = protocol::decode_reply(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
    if (want_id != nullptr) {
      if (auto* r = std::get_if<protocol::Reply>(&reply); r && r->id != *want_id)
        continue;  // a stale reply
    }
    return reply;
  }
}

std::optional<std::variant<protocol::Reply, protocol::Error>> Client::receive(
    std::chrono::milliseconds wait) {
  auto frames = wait.count() > 0 ? impl_->socket.recv(wait) : impl_->socket.try_recv();
  if (!frames || frames->empty()) return std::nullopt;
  const std::string& body = frames->back();
  return protocol::decode_reply(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
}

}  // namespace seqpipe::client
