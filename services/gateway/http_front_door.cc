#include "gateway/http_front_door.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "seqpipe/config/config.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::gateway {

using nlohmann::json;

HttpFrontDoor::HttpFrontDoor(zmq::context_t& context, std::string gateway_endpoint,
                             HttpOptions options, std::function<bool()> ready)
    : context_(context),
      gateway_endpoint_(std::move(gateway_endpoint)),
      options_(std::move(options)),
      ready_(std::move(ready)),
      server_(std::make_unique<httplib::Server>()) {
  httplib::Server& s = *server_;
  s.set_payload_max_length(options_.max_body_bytes);
  // Replies are small and written in pieces: without it Nagle's algorithm and the client's
  // delayed ACK hold each reply for ~40 ms.
  s.set_tcp_nodelay(true);
  const auto read = options_.read_timeout;
  s.set_read_timeout(read.count() / 1000, (read.count() % 1000) * 1000);
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a route's own answer already has a body
    if (res.status == 404) {        // no route took it: say what was wrong with it
      const HttpAnswer a = unrouted_request(req.method, req.path, options_.model_name);
      res.status = a.status;
      if (!a.allow.empty()) res.set_header("Allow", a.allow);
      res.set_content(a.body, "application/json");
      return;
    }
    res.set_content(json{{"error", "HTTP " + std::to_string(res.status)}}.dump(),
                    "application/json");
  });
  auto answer = [](httplib::Response& res, const HttpAnswer& a) {
    res.status = a.status;
    res.set_content(a.body, "application/json");
  };
  s.Post("/v1/generate", [this, answer](const httplib::Request& req, httplib::Response& res) {
    auto request = generate_request(req.body, next_id());
    if (auto* a = std::get_if<HttpAnswer>(&request)) return answer(res, *a);
    const auto& r = std::get<HttpRequest>(request);
    if (r.stream) return stream(r, res);
    answer(res, generate_reply(exchange(r), r.client_id));
  });
  s.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  s.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
    res.status = ready_() ? 200 : 503;
    res.set_content("{}", "application/json");
  });
  const std::string model = "/v2/models/" + options_.model_name;
  s.Get(model, [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(kserve_model_metadata(options_.model_name), "application/json");
  });
  s.Get(model + "/ready", [this](const httplib::Request&, httplib::Response& res) {
    res.status = ready_() ? 200 : 503;
    res.set_content("{}", "application/json");
  });
  s.Post(model + "/infer", [this, answer](const httplib::Request& req, httplib::Response& res) {
    auto request = kserve_infer_request(req.body, next_id());
    if (auto* a = std::get_if<HttpAnswer>(&request)) return answer(res, *a);
    const auto& r = std::get<HttpRequest>(request);
    answer(res, kserve_infer_reply(exchange(r), r.client_id, options_.model_name));
  });
  port_ = options_.port == 0 ? s.bind_to_any_port(options_.host)
                             : (s.bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0) {
    throw config::ConfigError("gateway.http_endpoint: " + options_.host + ":" +
                              std::to_string(options_.port) + " " +
                              transport::tcp_bind_problem(options_.host, options_.port));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

HttpFrontDoor::~HttpFrontDoor() {
  stopping_ = true;
  server_->stop();
  thread_.join();
}

std::string HttpFrontDoor::next_id() {
  std::lock_guard lock(mutex_);
  return "http-" + std::to_string(next_id_++);
}

std::shared_ptr<transport::Socket> HttpFrontDoor::checkout() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      auto socket = std::move(idle_.back());
      idle_.pop_back();
      return socket;
    }
  }
  auto socket = std::make_shared<transport::Socket>(context_, zmq::socket_type::dealer);
  socket->connect(gateway_endpoint_);
  return socket;
}

void HttpFrontDoor::give_back(std::shared_ptr<transport::Socket> socket) {
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(socket));
}

std::chrono::steady_clock::time_point HttpFrontDoor::reply_deadline(
    const HttpRequest& request) const {
  return std::chrono::steady_clock::now() +
         (request.timeout_ms ? std::chrono::milliseconds(*request.timeout_ms)
                             : options_.default_timeout) +
         std::chrono::seconds(2);
}

std::optional<std::string> HttpFrontDoor::await_reply(transport::Socket& socket,
                                                      const std::string& id,
                                                      std::chrono::steady_clock::time_point until,
                                                      const std::function<bool()>& idle) {
  while (!stopping_) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    auto frames = socket.recv(std::min(left, std::chrono::milliseconds(100)));
    if (!frames || frames->empty()) {
      if (idle && !idle()) break;
      continue;
    }
    const std::string& body = frames->back();
    auto reply = protocol::decode_reply(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
    if (const auto* r = std::get_if<protocol::Reply>(&reply); r && r->id != id)
      continue;  // a late reply to an earlier request on this socket
    return std::move(frames->back());
  }
  return std::nullopt;
}

namespace {
std::string no_reply(const std::string& id) {
  spdlog::warn("http: no reply from the gateway for {} in time", id);
  return protocol::encode_reply(protocol::error_reply(
      id, {protocol::ErrorCode::kUnavailable, "no reply from the gateway in time"}));
}

bool is_partial(const std::string& body) {
  auto reply = protocol::decode_reply(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
  const auto* r = std::get_if<protocol::Reply>(&reply);
  return r && r->partial;
}
}  // namespace

std::string HttpFrontDoor::exchange(const HttpRequest& request) {
  const std::string& id = request.internal_id;
  auto socket = checkout();
  const auto until = reply_deadline(request);
  if (socket->send({std::string_view(), std::string_view(request.msgpack)})) {
    if (auto body = await_reply(*socket, id, until)) {
      give_back(std::move(socket));
      return std::move(*body);
    }
  }
  return no_reply(id);
}

void HttpFrontDoor::stream(const HttpRequest& request, httplib::Response& res) {
  const std::string& id = request.internal_id;
  auto socket = checkout();
  const auto until = reply_deadline(request);
  std::optional<std::string> first;
  if (socket->send({std::string_view(), std::string_view(request.msgpack)}))
    first = await_reply(*socket, id, until);
  if (!first) first = no_reply(id);
  if (!is_partial(*first)) {
    const HttpAnswer a = generate_reply(*first, request.client_id);
    if (a.status != 200) {  // refused or failed before any text: a plain JSON error
      res.status = a.status;
      res.set_content(a.body, "application/json");
      give_back(std::move(socket));
      return;
    }
  }
  res.set_chunked_content_provider(
      "text/event-stream", [this, socket, request, body = std::move(*first), until](
                               size_t, httplib::DataSink& sink) mutable {
        bool gone = false;
        // An SSE comment while nothing comes: a write to a client that went away fails.
        const auto alive = [&] { return !(gone = !sink.write(":\n\n", 3)); };
        for (;;) {
          const std::string event = sse_event(body, request.client_id);
          if (!sink.write(event.data(), event.size())) {
            gone = true;
            break;
          }
          if (!is_partial(body)) {
            sink.done();
            give_back(socket);
            return true;
          }
          auto next = await_reply(*socket, request.internal_id, until, alive);
          if (gone) break;
          body = next ? std::move(*next) : no_reply(request.internal_id);
        }
        spdlog::info("http: the client of streamed request {} went away; cancelling it",
                     request.internal_id);
        protocol::Request cancel;
        cancel.op = protocol::Op::kCancel;
        cancel.id = request.internal_id;
        socket->send({std::string_view(), std::string_view(protocol::encode_request(cancel))});
        give_back(socket);  // open until the cancel is through; a later reply is skipped by id
        return false;
      });
}

}  // namespace seqpipe::gateway
