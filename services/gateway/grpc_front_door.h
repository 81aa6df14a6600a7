#pragma once
// KServe v2 over gRPC on the gateway (the Open Inference Protocol's GRPCInferenceService:
// ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer, and Triton's
// ModelStreamInfer), on gRPC's callback API. As the HTTP front door, each ModelInfer (and each
// request of a ModelStreamInfer) enters the gateway as a protocol request
// over an inproc DEALER into the gateway's own client ROUTER: admission, limits, deadlines, the
// response cache, cancellation and metrics are the msgpack path's exactly. gRPC's threads only
// translate and hand over; one thread of ours owns the DEALER (ZeroMQ sockets stay on one
// thread) and finishes the calls. The message translations are in kserve_grpc.h.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "gateway/http_json.h"
#include "seqpipe/transport/transport.h"

namespace grpc {
class Server;
class ServerUnaryReactor;
class Status;
}  // namespace grpc
namespace inference {
class ModelInferResponse;
}  // namespace inference

namespace seqpipe::gateway {

struct GrpcOptions {
  std::string host = "127.0.0.1";
  int port = 8001;  // 0: any free port (port() tells)
  std::string model_name;
  // A larger request message is refused by gRPC itself (RESOURCE_EXHAUSTED) before it is read
  // whole; the gateway's own limits apply to what is left.
  size_t max_message_bytes = 4 << 20;
  std::chrono::milliseconds default_timeout{1000};  // a call without a deadline nor timeout_ms
  // A call's gRPC deadline further away than this is held to it (the gateway's max_timeout_ms).
  std::chrono::milliseconds max_timeout{60000};
};

class GrpcFrontDoor {
 public:
  // Serves until destroyed. `gateway_endpoint`: an inproc endpoint the gateway's client ROUTER
  // binds in `context`. `ready`: whether every stage has a live replica (ServerReady,
  // ModelReady); it may block, so it runs on a thread of its own.
  GrpcFrontDoor(zmq::context_t& context, std::string gateway_endpoint, GrpcOptions options,
                std::function<bool()> ready);
  ~GrpcFrontDoor();
  GrpcFrontDoor(const GrpcFrontDoor&) = delete;
  GrpcFrontDoor& operator=(const GrpcFrontDoor&) = delete;

  int port() const { return port_; }

 private:
  class Service;  // the generated service's handlers
  class Stream;   // a ModelStreamInfer call
  // A request the gateway has not answered (finally) yet: a ModelInfer, or one request of a
  // ModelStreamInfer.
  struct Pending {
    grpc::ServerUnaryReactor* reactor = nullptr;        // a ModelInfer's,
    inference::ModelInferResponse* response = nullptr;  // with gRPC's response, until Finish;
    Stream* stream = nullptr;                           // or the ModelStreamInfer it came on
    bool streamed = false;  // sent as a streamed request: partial replies come first
    std::string client_id;
    std::chrono::steady_clock::time_point give_up;  // the gateway's deadline and a margin
  };

  // From gRPC's threads: hand a request over to the loop thread, or ask for readiness.
  void submit(HttpRequest request, Pending pending);
  void cancel(std::string tag);
  void ask_ready(std::function<void(bool)> answer);
  void post(std::function<void()> task);

  // On the loop thread.
  void loop();
  void start(HttpRequest request, Pending pending);
  void on_reply(const std::string& tag, const std::string& body);
  void on_cancel(const std::string& tag);
  void fail(const std::string& tag, const Pending& pending, const grpc::Status& status);
  void expire(std::chrono::steady_clock::time_point now);

  void probe_loop();  // the readiness thread

  GrpcOptions options_;
  std::function<bool()> ready_;
  transport::Socket gateway_;  // the loop thread's DEALER into the gateway
  int wake_fd_ = -1;           // an eventfd: posted tasks are waiting
  int port_ = 0;
  std::atomic<uint64_t> next_id_ = 1;       // gRPC's threads take ids from it
  std::map<std::string, Pending> pending_;  // by tag (the internal id); the loop thread's

  std::mutex mutex_;  // guards everything below
  std::condition_variable probe_wake_;
  std::vector<std::function<void()>> posted_;
  std::vector<std::function<void(bool)>> ready_waiting_;
  bool stopping_ = false;

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::thread probe_thread_;
  std::thread loop_thread_;
};

}  // namespace seqpipe::gateway
