#include "gateway/http_front_door.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cstdlib>
#include <ctime>
#include <optional>
#include <span>
#include <string_view>

#include "gateway/handler_boundary.h"
#include "gateway/http_deadline.h"
#include "gateway/http_models.h"
#include "gateway/http_openai.h"
#include "gateway/http_tgi.h"
#include "gateway/json_request.h"
#include "seqpipe/config/config_error.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::gateway {

namespace {

// Replies come back to the sink of their request (by its tag), not by the id in the reply: a
// request refused before its id was read is still answered on its connection.
constexpr std::chrono::seconds kReplyMargin{2};  // the trip back after the gateway's deadline
constexpr timeval kHeartbeat{1, 0};  // a streamed request's check that its client is still there

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 499:
      return "Client Closed Request";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return status < 500 ? "Bad Request" : "Internal Server Error";
  }
}

void send_answer(evhttp_request* req, const HttpAnswer& a) {
  evkeyvalq* headers = evhttp_request_get_output_headers(req);
  evhttp_add_header(headers, "Content-Type", "application/json");
  if (!a.allow.empty()) evhttp_add_header(headers, "Allow", a.allow.c_str());
  evbuffer* body = evbuffer_new();
  evbuffer_add(body, a.body.data(), a.body.size());
  evhttp_send_reply(req, a.status, reason(a.status), body);  // frees a request whose client left
  evbuffer_free(body);
}

void send_chunk(evhttp_request* req, const std::string& text) {
  evbuffer* chunk = evbuffer_new();
  evbuffer_add(chunk, text.data(), text.size());
  evhttp_send_reply_chunk(req, chunk);
  evbuffer_free(chunk);
}

std::string body_of(evhttp_request* req) {
  evbuffer* in = evhttp_request_get_input_buffer(req);
  std::string body(evbuffer_get_length(in), '\0');
  evbuffer_copyout(in, body.data(), body.size());
  return body;
}

std::string method_of(evhttp_request* req) {
  switch (evhttp_request_get_command(req)) {
    case EVHTTP_REQ_GET:
      return "GET";
    case EVHTTP_REQ_POST:
      return "POST";
    case EVHTTP_REQ_HEAD:
      return "HEAD";
    case EVHTTP_REQ_PUT:
      return "PUT";
    case EVHTTP_REQ_DELETE:
      return "DELETE";
    default:
      return "OTHER";
  }
}

std::string path_of(evhttp_request* req) {
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(req);
  const char* path = uri ? evhttp_uri_get_path(uri) : nullptr;
  if (path == nullptr || *path == '\0') return "/";
  char* decoded = evhttp_uridecode(path, 0, nullptr);
  std::string out = decoded ? decoded : path;
  free(decoded);  // NOLINT: libevent's allocation
  return out;
}

protocol::Reply no_reply(const std::string& id) {
  spdlog::warn("http: no reply from the gateway for {} in time", id);
  return protocol::error_reply(
      id, {protocol::ErrorCode::kUnavailable, "no reply from the gateway in time"});
}

template <class F>
event* new_event(event_base* base, evutil_socket_t fd, short what, F* self) {
  return event_new(
      base, fd, what, [](evutil_socket_t, short, void* arg) { (*static_cast<F*>(arg))(); }, self);
}

// evhttp's own bind listens with a backlog of 128: a burst of connections past it (a load test
// opening hundreds at once) would wait out SYN retransmits, and be accepted out of order, before
// the connection guard counts them. The kernel's limit (net.core.somaxconn) caps SOMAXCONN.
evhttp_bound_socket* bind_listener(evhttp* http, event_base* base, const std::string& host,
                                   int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) return nullptr;
  evconnlistener* listener = evconnlistener_new_bind(
      base, nullptr, nullptr, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE,
      SOMAXCONN, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  if (listener == nullptr) return nullptr;
  evhttp_bound_socket* bound = evhttp_bind_listener(http, listener);
  if (bound == nullptr) evconnlistener_free(listener);
  return bound;
}

}  // namespace

struct HttpFrontDoor::Pending {
  evhttp_request* req = nullptr;
  HttpRequest request;
  Route route = Route::kGenerate;
  bool streaming = false;                   // the event stream's head has gone out
  evhttp_connection* connection = nullptr;  // the stream's, until it closes
  uint32_t events = 0;                      // events sent on the stream
  std::function<void()> on_deadline, on_heartbeat;
  event* deadline = nullptr;
  event* heartbeat = nullptr;
  ~Pending() {
    if (deadline) event_free(deadline);
    if (heartbeat) event_free(heartbeat);
  }
};

HttpFrontDoor::HttpFrontDoor(zmq::context_t& context, Submissions& gateway, HttpOptions options,
                             std::function<bool(const std::string&)> ready)
    : context_(context),
      options_(std::move(options)),
      own_catalog_(options_.catalog ? nullptr : SharedCatalog::only(options_.model_name)),
      catalog_(options_.catalog ? options_.catalog : own_catalog_.get()),
      ready_(std::move(ready)),
      gateway_(gateway) {
  // Readiness answers and the stop come from other threads: the base must be lockable.
  static std::once_flag threads;
  std::call_once(threads, [] { evthread_use_pthreads(); });
  base_ = event_base_new();
  http_ = evhttp_new(base_);
  evhttp_set_max_headers_size(http_, static_cast<ev_ssize_t>(options_.max_header_bytes));
  evhttp_set_max_body_size(http_, static_cast<ev_ssize_t>(options_.max_body_bytes));
  const auto idle = options_.read_timeout;
  const timeval idle_tv{static_cast<time_t>(idle.count() / 1000),
                        static_cast<suseconds_t>(idle.count() % 1000 * 1000)};
  evhttp_set_timeout_tv(http_, &idle_tv);
  evhttp_set_allowed_methods(http_, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                        EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE);
  guard_ = std::make_unique<ConnectionGuard>(options_.max_connections, options_.request_timeout);
  evhttp_set_bevcb(
      http_,
      [](event_base* base, void* guard) {
        return static_cast<ConnectionGuard*>(guard)->open(base);
      },
      guard_.get());
  evhttp_set_gencb(
      http_,
      [](evhttp_request* req, void* self) {
        static_cast<HttpFrontDoor*>(self)->on_request_guarded(req);
      },
      this);
  evhttp_bound_socket* bound = bind_listener(http_, base_, options_.host, options_.port);
  if (bound == nullptr) {
    const std::string problem = transport::tcp_bind_problem(options_.host, options_.port);
    evhttp_free(http_);
    event_base_free(base_);
    throw config::ConfigError("gateway.http_endpoint: " + options_.host + ":" +
                              std::to_string(options_.port) + " " + problem);
  }
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  getsockname(evhttp_bound_socket_get_fd(bound), reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  wake_ = event_new(
      base_, -1, 0,
      [](evutil_socket_t, short, void* self) { static_cast<HttpFrontDoor*>(self)->run_posted(); },
      this);
  sweep_ = event_new(
      base_, -1, EV_PERSIST,
      [](evutil_socket_t, short, void* guard) {
        static_cast<ConnectionGuard*>(guard)->sweep(std::chrono::steady_clock::now());
      },
      guard_.get());
  constexpr timeval kSweep{0, 200 * 1000};
  event_add(sweep_, &kSweep);
  if (!options_.control_endpoint.empty()) {
    repository_ = std::make_unique<RepositoryClient>(
        context_, options_.control_endpoint,
        std::chrono::duration_cast<std::chrono::milliseconds>(model_control::kAnswerWait));
  }
  probe_thread_ = std::thread([this] { probe_loop(); });
  loop_thread_ = std::thread([this] { event_base_loop(base_, EVLOOP_NO_EXIT_ON_EMPTY); });
}

HttpFrontDoor::~HttpFrontDoor() {
  repository_.reset();  // its last answer is posted while the loop still runs
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  probe_wake_.notify_all();
  probe_thread_.join();
  event_base_loopbreak(base_);
  loop_thread_.join();
  for (auto& [tag, p] : pending_) {  // a request whose client left is no connection's to free
    if (evhttp_request_get_connection(p->req) == nullptr) evhttp_request_free(p->req);
  }
  pending_.clear();
  event_free(wake_);
  event_free(sweep_);
  evhttp_free(http_);
  guard_.reset();  // its references, after evhttp's: the sockets close now
  event_base_free(base_);
}

void HttpFrontDoor::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    posted_.push_back(std::move(task));
  }
  event_active(wake_, EV_READ, 0);
}

void HttpFrontDoor::run_posted() {
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard lock(mutex_);
    tasks.swap(posted_);
  }
  for (auto& task : tasks) task();
}

// Every request enters inside the one boundary (handler_boundary.h): a handler that throws
// answers that request 500, never aborts the gateway.
void HttpFrontDoor::on_request_guarded(evhttp_request* req) {
  guard_handler(
      options_.metrics, Door::kHttp, method_of(req) + " " + path_of(req), [&] { on_request(req); },
      [&] { send_answer(req, kserve_error(500, "internal: the request could not be handled")); });
}

void HttpFrontDoor::on_request(evhttp_request* req) {
  // Streamed replies go in pieces: without it Nagle's algorithm and the client's delayed ACK
  // hold each piece for ~40 ms.
  if (evhttp_connection* connection = evhttp_request_get_connection(req)) {
    bufferevent* socket = evhttp_connection_get_bufferevent(connection);
    const int one = 1;
    setsockopt(bufferevent_getfd(socket), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    guard_->delivered(socket);
    evhttp_request_set_on_complete_cb(
        req,
        [](evhttp_request* done, void* guard) {
          if (evhttp_connection* c = evhttp_request_get_connection(done))
            static_cast<ConnectionGuard*>(guard)->answered(evhttp_connection_get_bufferevent(c));
        },
        guard_.get());
  }
  const std::string method = method_of(req), path = path_of(req);
  // HEAD is GET without the body, which evhttp leaves out of a HEAD's reply itself.
  if (method == "GET" || method == "HEAD") {
    if (path == "/v2/health/live") return send_answer(req, {.status = 200, .body = "{}"});
    if (path == "/v2/health/ready") return ask_ready(req, "");
    if (auto key = model_key(path, "/ready")) return ask_ready(req, *key);
    if (auto answer = model_listing(*catalog_->get(), path)) return send_answer(req, *answer);
    if (path == "/health") return ask_ready(req, "");
    if (path == "/info")
      return send_answer(req, {.status = 200, .body = tgi_info(options_.model_name)});
  } else if (method == "POST") {
    const std::string id = "http-" + std::to_string(next_id_), body = body_of(req);
    if (is_repository_path(path)) return ask_repository(req, path, body);
    std::optional<Route> route;
    std::variant<HttpRequest, HttpAnswer> request;
    if (path == "/v1/generate") {
      route = Route::kGenerate, request = generate_request(body, id);
    } else if (auto infer = kserve_model_path(path, "/infer");
               infer && (options_.repository || infer->name == options_.model_name)) {
      route = Route::kInfer, request = kserve_infer_request(body, id, infer->name, infer->version);
    } else if (path == "/v1/completions" || path == "/v1/chat/completions") {
      const bool chat = path == "/v1/chat/completions";
      route = Route::kOpenAi,
      request = openai_request(body, id, chat, std::time(nullptr), options_.repository);
    } else if (path == "/generate" || path == "/generate_stream") {
      route = Route::kTgi, request = tgi_request(body, id, path == "/generate_stream");
    }
    if (route) {
      ++next_id_;
      if (auto* a = std::get_if<HttpAnswer>(&request)) return send_answer(req, *a);
      std::get<HttpRequest>(request).message_bytes = body.size();
      const auto* headers = evhttp_request_get_input_headers(req);
      auto timeout = request_timeout(evhttp_find_header(headers, kRequestTimeoutHeader));
      if (auto* a = std::get_if<HttpAnswer>(&timeout)) return send_answer(req, *a);
      if (auto ms = std::get<std::optional<uint32_t>>(timeout))
        set_timeout(std::get<HttpRequest>(request), *ms);
      return submit(req, std::move(std::get<HttpRequest>(request)), *route);
    }
  }
  send_answer(req, unrouted_request(method, path, options_.model_name));
}

void HttpFrontDoor::submit(evhttp_request* req, HttpRequest request, Route route) {
  const std::string tag = request.internal_id;
  // The gateway's thread calls the sink; the reply is answered on this loop's thread.
  Submission submission{typed_request(request, *catalog_), [this, tag](protocol::Reply&& reply) {
                          post([this, tag, reply = std::move(reply)] {
                            if (pending_.count(tag) != 0) on_reply_guarded(tag, reply);
                          });
                        }};
  request.fields = nullptr;  // typed now: the reply needs only the rest
  if (!gateway_.push(std::move(submission))) {
    Pending refused;
    refused.req = req;
    refused.request = std::move(request);
    refused.route = route;
    return send_answer(req, answer_of(refused, no_reply(tag)));
  }
  auto p = std::make_unique<Pending>();
  p->req = req;
  p->route = route;
  const auto wait = (request.timeout_ms ? std::chrono::milliseconds(*request.timeout_ms)
                                        : options_.default_timeout) +
                    kReplyMargin;
  p->request = std::move(request);
  p->on_deadline = [this, tag] { on_deadline(tag); };
  p->deadline = new_event(base_, -1, 0, &p->on_deadline);
  const timeval tv{static_cast<time_t>(wait.count() / 1000),
                   static_cast<suseconds_t>(wait.count() % 1000 * 1000)};
  event_add(p->deadline, &tv);
  pending_.emplace(tag, std::move(p));
}

void HttpFrontDoor::on_reply_guarded(const std::string& tag, const protocol::Reply& reply) {
  guard_handler(
      options_.metrics, Door::kHttp, "the reply to " + tag, [&] { on_reply(tag, reply); },
      [&] {
        auto it = pending_.find(tag);
        if (it == pending_.end()) return;
        Pending& p = *it->second;
        if (p.streaming) {
          evhttp_send_reply_end(p.req);
        } else {
          send_answer(p.req, kserve_error(500, "internal: the reply could not be translated"));
        }
        pending_.erase(it);
      });
}

void HttpFrontDoor::on_reply(const std::string& tag, const protocol::Reply& reply) {
  auto it = pending_.find(tag);
  if (it == pending_.end()) return;  // a late reply: the request was given up or cancelled
  Pending& p = *it->second;
  const bool partial = reply.partial;
  if (!p.request.stream || (!p.streaming && !partial)) {
    // Not streamed, or refused or failed before any text: a plain JSON answer.
    const HttpAnswer a = answer_of(p, reply);
    if (!p.request.stream || a.status != 200) {
      send_answer(p.req, a);
      pending_.erase(it);
      return;
    }
  }
  if (!p.streaming) {
    evhttp_add_header(evhttp_request_get_output_headers(p.req), "Content-Type",
                      "text/event-stream");
    evhttp_send_reply_start(p.req, 200, "OK");
    p.streaming = true;
    p.on_heartbeat = [this, tag] { on_heartbeat(tag); };
    p.heartbeat = new_event(base_, -1, EV_PERSIST, &p.on_heartbeat);
    event_add(p.heartbeat, &kHeartbeat);
    // A client leaving mid-stream is seen when evhttp closes its connection, not only at the
    // next heartbeat: a short stream would otherwise end before anyone noticed.
    if ((p.connection = evhttp_request_get_connection(p.req)) != nullptr) {
      evhttp_connection_set_closecb(
          p.connection,
          [](evhttp_connection* closed, void* self) {
            static_cast<HttpFrontDoor*>(self)->on_closed(closed);
          },
          this);
    }
  }
  send_chunk(p.req, events_of(p, reply));
  if (!partial) {
    evhttp_send_reply_end(p.req);
    pending_.erase(it);
  }
}

HttpAnswer HttpFrontDoor::answer_of(const Pending& p, const protocol::Reply& reply) const {
  switch (p.route) {
    case Route::kInfer:
      return kserve_infer_reply(reply, p.request.client_id, reply_model(p.request));
    case Route::kOpenAi:
      return openai_reply(reply, p.request, reply_model(p.request));
    case Route::kTgi:
      return tgi_reply(reply, p.request);
    case Route::kGenerate:
      break;
  }
  return generate_reply(reply, p.request.client_id);
}

std::string HttpFrontDoor::events_of(Pending& p, const protocol::Reply& reply) const {
  if (p.route == Route::kTgi) return tgi_event(reply, p.events++, p.request);
  if (p.route == Route::kOpenAi) return openai_events(reply, p.request, reply_model(p.request));
  return sse_event(reply, p.request.client_id);
}

void HttpFrontDoor::on_deadline(std::string tag) {
  auto it = pending_.find(tag);
  if (it != pending_.end()) on_reply_guarded(tag, no_reply(it->second->request.internal_id));
}

void HttpFrontDoor::on_closed(evhttp_connection* closed) {
  // Inside evhttp's teardown: only the heartbeat is woken, to cancel from the loop as usual.
  for (auto& [tag, p] : pending_) {
    if (p->connection != closed) continue;
    p->connection = nullptr;
    if (p->heartbeat) event_active(p->heartbeat, EV_TIMEOUT, 0);
  }
}

void HttpFrontDoor::on_heartbeat(std::string tag) {
  auto it = pending_.find(tag);
  if (it == pending_.end()) return;
  Pending& p = *it->second;
  if (evhttp_request_get_connection(p.req) != nullptr) {
    // An SSE comment while nothing comes: a write to a client that went away fails, and the
    // request loses its connection.
    send_chunk(p.req, ":\n\n");
    return;
  }
  spdlog::info("http: the client of streamed request {} went away; cancelling it", tag);
  protocol::Request cancel;
  cancel.op = protocol::Op::kCancel;
  cancel.id = tag;
  (void)gateway_.push({std::move(cancel), [](protocol::Reply&&) {}});  // a cancel has no reply
  evhttp_send_reply_end(p.req);                                        // frees the request
  pending_.erase(it);
}

std::optional<std::string> HttpFrontDoor::model_key(std::string_view path,
                                                    std::string_view suffix) const {
  const auto named = kserve_model_path(path, suffix);
  if (!named) return std::nullopt;
  auto key = catalog_->get()->resolve(named->name, named->version);
  if (auto* found = std::get_if<std::string>(&key)) return std::move(*found);
  return std::nullopt;
}

void HttpFrontDoor::ask_ready(evhttp_request* req, std::string model) {
  ready_waiting_.emplace_back(req, std::move(model));
  if (probing_) return;  // the probe under way answers this one too (or starts the next)
  start_probe();
}

void HttpFrontDoor::ask_repository(evhttp_request* req, std::string_view path,
                                   std::string_view body) {
  const auto refused = repository_refusal(
      options_.repository_api, options_.repository_token,
      evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization"));
  if (refused && refused->status == 401)
    evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
  if (refused) return send_answer(req, *refused);
  auto request = repository_request(path, body);
  if (auto* answer = std::get_if<HttpAnswer>(&request)) return send_answer(req, *answer);
  if (!repository_)
    return send_answer(req, {.status = 503, .body = R"({"error":"no model control here"})"});
  const auto& asked = std::get<model_control::ControlRequest>(request);
  const bool taken = repository_->ask(asked, [this, req, asked](model_control::ControlReply reply) {
    // On the repository client's thread: inside the boundary too.
    HttpAnswer answer;
    guard_handler(
        options_.metrics, Door::kHttp, "the repository answer",
        [&] { answer = repository_answer(asked, reply); },
        [&] { answer = kserve_error(500, "internal: the answer could not be translated"); });
    post([this, req, answer = std::move(answer)] { send_answer(req, answer); });
  });
  if (!taken) {
    send_answer(req, kserve_error(503, std::to_string(RepositoryClient::kMaxCalls) +
                                           " repository calls are in flight; retry later"));
  }
}

void HttpFrontDoor::start_probe() {
  probing_ = true;
  {
    std::lock_guard lock(mutex_);
    probe_models_.clear();
    for (const auto& [req, model] : ready_waiting_) probe_models_.insert(model);
    probe_asked_ = true;
  }
  probe_wake_.notify_one();
}

void HttpFrontDoor::probe_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    probe_wake_.wait(lock, [this] { return probe_asked_ || stopping_; });
    if (stopping_) return;
    probe_asked_ = false;
    const std::set<std::string> models = std::move(probe_models_);
    probe_models_.clear();
    lock.unlock();
    std::map<std::string, bool> ready;
    for (const std::string& model : models) {
      // A probe that throws (the pipeline could not be asked) reads as not ready.
      guard_handler(
          options_.metrics, Door::kHttp, "the readiness probe of '" + model + "'",
          [&] { ready[model] = ready_(model); }, [&] { ready[model] = false; });
    }
    post([this, ready = std::move(ready)] {
      // Answered: those asking about a model probed; the others (asked meanwhile) go next.
      std::vector<std::pair<evhttp_request*, std::string>> later;
      for (auto& [req, model] : ready_waiting_) {
        auto it = ready.find(model);
        if (it == ready.end()) {
          later.emplace_back(req, std::move(model));
          continue;
        }
        send_answer(req, {.status = it->second ? 200 : 503, .body = "{}"});
      }
      ready_waiting_ = std::move(later);
      probing_ = false;
      if (!ready_waiting_.empty()) start_probe();
    });
    lock.lock();
  }
}

}  // namespace seqpipe::gateway
