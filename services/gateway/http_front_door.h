#pragma once
// HTTP/JSON on the gateway, over cpp-httplib: POST /v1/generate (the msgpack request and reply
// as JSON) and the KServe v2 endpoints Triton and KServe share (health, model metadata, infer).
// Each HTTP request enters the gateway as a protocol request, over an inproc DEALER into the
// gateway's own client ROUTER: admission, deadlines, the response cache, cancellation and
// metrics are the msgpack path's exactly, and the gateway's loop stays single-threaded. The
// JSON translations are in http_json.h.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>
#include <zmq.hpp>

#include "gateway/http_json.h"
#include "seqpipe/transport/transport.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace seqpipe::gateway {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (port() tells)
  std::string model_name;
  size_t max_body_bytes = 1 << 20;                   // larger: 413 before it is read
  std::chrono::milliseconds default_timeout{10000};  // a request without timeout_ms
  std::chrono::milliseconds read_timeout{5000};      // a client slower than this is dropped
};

class HttpFrontDoor {
 public:
  // Serves on its own threads until destroyed. `gateway_endpoint`: an inproc endpoint the
  // gateway's client ROUTER binds in `context`. `ready`: whether every stage has a live replica
  // (GET /v2/health/ready); it runs on an HTTP thread.
  HttpFrontDoor(zmq::context_t& context, std::string gateway_endpoint, HttpOptions options,
                std::function<bool()> ready);
  ~HttpFrontDoor();
  HttpFrontDoor(const HttpFrontDoor&) = delete;
  HttpFrontDoor& operator=(const HttpFrontDoor&) = delete;

  int port() const { return port_; }

 private:
  // Sends one translated request into the gateway and returns its msgpack reply (an
  // unavailable error reply when none comes in time).
  std::string exchange(const HttpRequest& request);
  // A streamed request: server-sent events, one per partial reply, then the final reply's; an
  // error before the first partial is a plain JSON answer with its HTTP status. A client that
  // goes away has its request cancelled.
  void stream(const HttpRequest& request, httplib::Response& res);
  // When to stop waiting for a reply to `request`: the gateway answers every request by its
  // deadline; the margin covers the trip back.
  std::chrono::steady_clock::time_point reply_deadline(const HttpRequest& request) const;
  // The next reply to `id` on `socket` (partial or final); nullopt at `until`, when stopping, or
  // when `idle` (called after each 100 ms without one) returns false.
  std::optional<std::string> await_reply(transport::Socket& socket, const std::string& id,
                                         std::chrono::steady_clock::time_point until,
                                         const std::function<bool()>& idle = {});
  std::shared_ptr<transport::Socket> checkout();
  void give_back(std::shared_ptr<transport::Socket> socket);
  std::string next_id();

  zmq::context_t& context_;
  std::string gateway_endpoint_;
  HttpOptions options_;
  std::function<bool()> ready_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::mutex mutex_;                                      // guards idle_ and next_id_
  std::vector<std::shared_ptr<transport::Socket>> idle_;  // DEALERs between requests
  uint64_t next_id_ = 1;
  std::atomic<bool> stopping_{false};  // replies still awaited are given up
  std::thread thread_;
};

}  // namespace seqpipe::gateway
