#pragma once
// KServe v2 over gRPC on the gateway (the Open Inference Protocol's GRPCInferenceService:
// ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer, and Triton's
// ModelStreamInfer), on gRPC's callback API. A call's model_name and model_version name a model
// version of the gateway's catalog, as HTTP's KServe paths do (kserve_grpc_model). Each ModelInfer
// (and each request of a ModelStreamInfer) enters the gateway as a protocol request naming that
// model, as a client's over its ROUTER:
// admission, limits, deadlines, the response cache, cancellation and metrics are the msgpack
// path's exactly. gRPC's threads only translate and hand over; the gateway's own loop thread
// takes the requests (it polls wake_fd()), and its replies come back to answer() on that thread,
// which finishes the calls: no thread and no socket between the door and the gateway, so a call
// costs two thread wake-ups fewer than over an inproc socket. The message translations are in
// kserve_grpc.h.
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
#include <utility>
#include <vector>

#include "gateway/gateway.h"
#include "gateway/http_json.h"
#include "gateway/shared_catalog.h"
#include "seqpipe/observability/metrics.h"

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
  // A larger request message is refused by gRPC itself (RESOURCE_EXHAUSTED) before it is read
  // whole; the gateway's own limits apply to what is left.
  size_t max_message_bytes = 4 << 20;
  std::chrono::milliseconds default_timeout{1000};  // a call without a deadline nor timeout_ms
  // A call's gRPC deadline further away than this is held to it (the gateway's max_timeout_ms).
  std::chrono::milliseconds max_timeout{60000};
  // Responses a ModelStreamInfer call may have queued for a client that does not read them; one
  // more finishes the call RESOURCE_EXHAUSTED (its requests in flight are cancelled), so a
  // client that never reads costs at most this many responses' memory.
  size_t max_queued_responses = 1024;
  // Where handler exceptions are counted (handler_boundary.h); none: only logged.
  metrics::FrontDoorMetrics* metrics = nullptr;
};

class GrpcFrontDoor {
 public:
  using Clock = std::chrono::steady_clock;
  // A request into the gateway, typed (Gateway::submit); its sink is the door's.
  using ToGateway = std::function<void(Submission&&)>;

  // Serves until destroyed the models of `catalog` (the gateway's loop keeps it current; it
  // outlives the door). `ready(key)`: whether every stage has a live replica of that model
  // version (ModelReady), or whether the pipeline is ready (key "": ServerReady, and ModelReady
  // without a repository); it may block, so it runs on a thread of its own.
  GrpcFrontDoor(GrpcOptions options, const SharedCatalog& catalog,
                std::function<bool(const std::string&)> ready);
  ~GrpcFrontDoor();  // on the gateway's thread: the calls still open are answered unavailable
  GrpcFrontDoor(const GrpcFrontDoor&) = delete;
  GrpcFrontDoor& operator=(const GrpcFrontDoor&) = delete;

  int port() const { return port_; }
  // Readable when gRPC's threads have handed something over: the gateway's loop polls it and
  // then calls serve().
  int wake_fd() const { return wake_fd_; }

  // The rest on the gateway's thread.
  // Hands what gRPC's threads handed over (requests, cancels) to `to_gateway`, each request
  // typed by json_request.h's validator; the gateway answers each on this thread, through the
  // request's sink (the call is finished, or a stream gets its response).
  void serve(const ToGateway& to_gateway);
  // Gives up (unavailable) on calls the gateway has not answered long after their deadline
  // (looked at every 100 ms at most: call it every round).
  void expire(Clock::time_point now);

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
    // The model and version its responses name: as the call named them, then (on the gateway's
    // thread, as the request goes in) the version the gateway runs it on.
    std::string model, version;
    Clock::time_point give_up;  // the gateway's deadline and a margin
  };
  using Task = std::function<void(const ToGateway&)>;  // run by serve()

  // From gRPC's threads: hand a request over to the gateway's thread, or ask for readiness.
  void submit(HttpRequest request, Pending pending);
  void cancel(std::string tag);
  void ask_ready(std::string key, std::function<void(bool)> answer);
  void wake();  // serve() has something to do

  // On the gateway's thread.
  void start(HttpRequest request, Pending pending, const ToGateway& to_gateway);
  void on_reply(const std::string& tag, const protocol::Reply& reply);
  void on_cancel(const std::string& tag, const ToGateway& to_gateway);
  void fail(const std::string& tag, const Pending& pending, const grpc::Status& status);

  void probe_loop();  // the readiness thread

  GrpcOptions options_;
  const SharedCatalog& catalog_;
  std::function<bool(const std::string&)> ready_;
  int wake_fd_ = -1;  // an eventfd: posted tasks are waiting
  int port_ = 0;
  std::atomic<uint64_t> next_id_ = 1;       // gRPC's threads take ids from it
  std::map<std::string, Pending> pending_;  // by tag (the internal id); the gateway thread's
  Clock::time_point last_expiry_;           // the gateway thread's

  std::mutex mutex_;  // guards everything below
  std::condition_variable probe_wake_;
  std::vector<Task> posted_;
  // Readiness asked, not yet answered: the model version's key ("": the pipeline's) and whom to
  // tell.
  std::vector<std::pair<std::string, std::function<void(bool)>>> ready_waiting_;
  bool stopping_ = false;

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::thread probe_thread_;
};

}  // namespace seqpipe::gateway
