#pragma once
// HTTP/JSON on the gateway, over libevent's evhttp: POST /v1/generate (the msgpack request and
// reply as JSON) and the KServe v2 endpoints Triton and KServe share (health, model metadata,
// infer). One event loop thread serves every connection: a slow or idle client costs a socket
// and a few KiB, never a thread, so it cannot stall anyone else. Each HTTP request enters the
// gateway as a typed protocol request (json_request.h's validator), handed over to the gateway's
// loop (Submissions, then Gateway::submit): admission, deadlines, the response cache,
// cancellation and metrics are the msgpack path's exactly, and the gateway's loop stays
// single-threaded. Its typed replies come back to this door's loop thread. The JSON
// translations are in http_json.h.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "gateway/connection_guard.h"
#include "gateway/http_json.h"
#include "gateway/http_repository.h"
#include "gateway/shared_catalog.h"
#include "gateway/submissions.h"
#include "seqpipe/observability/metrics.h"
#include "seqpipe/transport/transport.h"

struct bufferevent;
struct event;
struct event_base;
struct evhttp;
struct evhttp_connection;
struct evhttp_request;

namespace seqpipe::gateway {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;         // 0: any free port (port() tells)
  std::string model_name;  // the default model's
  // A model repository is served: a request's model routes it (KServe's path, OpenAI's `model`).
  bool repository = false;
  // The models served: a KServe path's model resolves in it (config::ModelCatalog::resolve),
  // GET /v1/models lists it; unset: only model_name is served (version 1, under the key "").
  const SharedCatalog* catalog = nullptr;
  // A larger body is refused with 413 at once: by its Content-Length before it is read, a
  // chunked one as soon as its chunks add up to more (nothing past the limit is buffered).
  size_t max_body_bytes = 1 << 20;
  // The request line and headers together; longer (a 100 KB URL): refused at once.
  size_t max_header_bytes = 16 << 10;
  std::chrono::milliseconds default_timeout{10000};  // a request without timeout_ms
  // A connection that sends or takes nothing for this long is closed (an idle keep-alive one,
  // or a client that stopped mid-request).
  std::chrono::milliseconds read_timeout{5000};
  // A connection that has not delivered a whole request this long after it opened (or after
  // its last reply) is closed, however slowly it keeps sending: a client sending its headers a
  // byte a second never goes idle.
  std::chrono::milliseconds request_timeout{10000};
  // Connections open at once; one more is answered 503 and closed.
  size_t max_connections = 512;
  // The supervisor's control socket, for the repository extension (http_repository.h); empty:
  // its calls are answered 503.
  std::string control_endpoint = {};
  // Where handler exceptions are counted (handler_boundary.h); none: only logged.
  metrics::FrontDoorMetrics* metrics = nullptr;
  // Whether the repository extension is served here (false: 403 naming
  // gateway.repository_api_public), and the bearer token its calls must carry (empty: none).
  bool repository_api = true;
  std::string repository_token = {};
};

class HttpFrontDoor {
 public:
  // Serves on its own thread until destroyed. `gateway`: where its requests go to the gateway's
  // loop (which outlives the door). `context`: the repository extension's sockets'.
  // `ready(model)`: whether the pipeline serves that model version's key now ("": the whole
  // pipeline); asked on a thread of its own, as it may block.
  HttpFrontDoor(zmq::context_t& context, Submissions& gateway, HttpOptions options,
                std::function<bool(const std::string&)> ready);
  ~HttpFrontDoor();
  HttpFrontDoor(const HttpFrontDoor&) = delete;
  HttpFrontDoor& operator=(const HttpFrontDoor&) = delete;

  int port() const { return port_; }

 private:
  struct Pending;  // an HTTP request the gateway has not finished answering
  enum class Route { kGenerate, kInfer, kOpenAi, kTgi };

  // On the loop thread, all of them.
  void on_request_guarded(evhttp_request* req);
  void on_request(evhttp_request* req);
  void submit(evhttp_request* req, HttpRequest request, Route route);
  // A reply (or the door's own no_reply) to request `tag`, inside the handler boundary.
  void on_reply_guarded(const std::string& tag, const protocol::Reply& reply);
  void on_reply(const std::string& tag, const protocol::Reply& reply);
  // The model a request's reply names: the one it named, else the default.
  const std::string& reply_model(const HttpRequest& r) const {
    return r.model.empty() ? options_.model_name : r.model;
  }
  // A reply as its route's answer, and (streamed) as its route's events.
  HttpAnswer answer_of(const Pending& p, const protocol::Reply& reply) const;
  std::string events_of(Pending& p, const protocol::Reply& reply) const;
  // By value: a timer's callback owns the tag it passes, and answering frees it.
  void on_deadline(std::string tag);
  void on_heartbeat(std::string tag);
  void on_closed(evhttp_connection* closed);  // evhttp's close callback of a stream's connection
  void ask_ready(evhttp_request* req, std::string model);
  void ask_repository(evhttp_request* req, std::string_view path, std::string_view body);
  void start_probe();  // asks the readiness thread about every model waiting
  // The key of the model version `path` names with `suffix`, or nullopt (not a model path, or a
  // model not served).
  std::optional<std::string> model_key(std::string_view path, std::string_view suffix) const;
  void run_posted();
  // Runs `task` on the loop thread (from any thread).
  void post(std::function<void()> task);
  void probe_loop();  // the readiness thread

  zmq::context_t& context_;
  HttpOptions options_;
  std::unique_ptr<SharedCatalog> own_catalog_;  // model_name's alone, when options_ has none
  const SharedCatalog* catalog_ = nullptr;      // options_.catalog, or own_catalog_
  std::function<bool(const std::string&)> ready_;
  Submissions& gateway_;
  event_base* base_ = nullptr;
  evhttp* http_ = nullptr;
  event* wake_ = nullptr;   // posted tasks (the gateway's replies among them) are waiting
  event* sweep_ = nullptr;  // the connection guard's round
  std::unique_ptr<ConnectionGuard> guard_;
  int port_ = 0;
  uint64_t next_id_ = 1;
  std::map<std::string, std::unique_ptr<Pending>> pending_;  // by tag (the internal id)
  // Readiness asked, not yet known: the request and the model key it asks about.
  std::vector<std::pair<evhttp_request*, std::string>> ready_waiting_;
  bool probing_ = false;

  std::mutex mutex_;  // guards posted_, probe_asked_, stopping_
  std::condition_variable probe_wake_;
  std::vector<std::function<void()>> posted_;
  bool probe_asked_ = false;
  std::set<std::string> probe_models_;  // what the readiness thread is to ask about
  bool stopping_ = false;
  std::thread probe_thread_;
  std::thread loop_thread_;
  std::unique_ptr<RepositoryClient> repository_;  // with options_.control_endpoint
};

}  // namespace seqpipe::gateway
