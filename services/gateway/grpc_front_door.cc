#include "gateway/grpc_front_door.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <set>

#include "gateway/handler_boundary.h"
#include "gateway/json_request.h"
#include "gateway/kserve_grpc.h"
#include "grpc_predict_v2.grpc.pb.h"
#include "seqpipe/config/config_error.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::gateway {

namespace {

using Clock = GrpcFrontDoor::Clock;
constexpr std::chrono::seconds kReplyMargin{2};   // the trip back after the gateway's deadline
constexpr std::chrono::milliseconds kRound{100};  // how often calls are looked at for expiry
grpc::Status internal_status() {
  return {grpc::StatusCode::INTERNAL, "internal: the call could not be handled"};
}

// A ModelInfer's reactor: a call the client cancels (or whose deadline passes) cancels the
// request, as a msgpack cancel does. gRPC calls OnDone once Finish is through: it is the last.
class InferReactor : public grpc::ServerUnaryReactor {
 public:
  explicit InferReactor(std::function<void()> on_cancel) : on_cancel_(std::move(on_cancel)) {}
  void OnCancel() override { on_cancel_(); }
  void OnDone() override { delete this; }

 private:
  std::function<void()> on_cancel_;
};

// What is left of a call's deadline, in ms and at most `most`; nullopt when it has none.
std::optional<uint32_t> deadline_ms(const grpc::CallbackServerContext& context,
                                    std::chrono::milliseconds most) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return std::nullopt;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::system_clock::now());
  return static_cast<uint32_t>(std::clamp(left, std::chrono::milliseconds(1), most).count());
}

}  // namespace

// A ModelStreamInfer call: requests read one after another, each submitted as ModelInfer's are,
// each answered by its responses (partials, then a final one) in the order the gateway sends
// them. gRPC allows one write at a time, so responses queue here. The call ends (OK) once the
// client has closed its side and every request has had its final response; a cancelled call
// cancels its requests in the pipeline. Its methods run on gRPC's threads and on the gateway's
// thread (deliver, drop): the mutex guards the state. OnDone is the last thing gRPC calls.
class GrpcFrontDoor::Stream : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                                             inference::ModelStreamInferResponse> {
 public:
  Stream(GrpcFrontDoor& door, grpc::CallbackServerContext* context)
      : door_(door), context_(context) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side, or the call is over
      std::unique_lock lock(mutex_);
      reads_done_ = true;
      return finish_if_done(lock);
    }
    guard_handler(
        door_.options_.metrics, Door::kGrpc, "a ModelStreamInfer request",
        [&] { submit(request_); },
        [&] {
          std::lock_guard lock(mutex_);
          write(kserve_grpc_stream_error(internal_status(), request_.id(),
                                         {request_.model_name(), request_.model_version()}));
        });
    std::unique_lock lock(mutex_);
    if (overflowed_) {  // nothing more is read: the call finishes as soon as it can
      reads_done_ = true;
      return finish_if_done(lock);
    }
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock lock(mutex_);
    writes_.pop_front();
    if (!ok) writes_.clear();  // the client is gone: OnCancel follows
    writing_ = !writes_.empty();
    if (writing_) StartWrite(&writes_.front());
    finish_if_done(lock);
  }

  void OnCancel() override {
    std::vector<std::string> tags;
    {
      std::lock_guard lock(mutex_);
      cancelled_ = true;
      tags.assign(in_flight_.begin(), in_flight_.end());
    }
    for (auto& tag : tags) door_.cancel(std::move(tag));
  }

  void OnDone() override { delete this; }

  // On the gateway's thread: a response to request `tag`; `final`: its last.
  void deliver(inference::ModelStreamInferResponse response, const std::string& tag, bool final) {
    std::unique_lock lock(mutex_);
    if (final) in_flight_.erase(tag);
    if (!cancelled_) write(std::move(response));
    finish_if_done(lock);
  }
  // On the gateway's thread: request `tag` was cancelled with the call; no response follows.
  void drop(const std::string& tag) {
    std::unique_lock lock(mutex_);
    in_flight_.erase(tag);
    finish_if_done(lock);
  }

 private:
  void submit(const inference::ModelInferRequest& request) {
    const auto known =
        kserve_grpc_model(*door_.catalog_.get(), request.model_name(), request.model_version());
    const std::string tag = "grpc-" + std::to_string(door_.next_id_++);
    auto translated =
        std::holds_alternative<config::ModelVersion>(known)
            ? kserve_grpc_request(request, tag, deadline_ms(*context_, door_.options_.max_timeout),
                                  /*stream=*/true)
            : std::variant<HttpRequest, grpc::Status>(std::get<grpc::Status>(known));
    std::unique_lock lock(mutex_);
    // A request read as the call was cancelled: OnCancel has cancelled what was in flight then,
    // so this one is not handed over at all.
    if (cancelled_) return;
    if (auto* status = std::get_if<grpc::Status>(&translated)) {
      return write(kserve_grpc_stream_error(*status, request.id(),
                                            {request.model_name(), request.model_version()}));
    }
    auto& http = std::get<HttpRequest>(translated);
    in_flight_.insert(tag);
    lock.unlock();
    Pending pending;
    pending.stream = this;
    pending.streamed = http.stream;
    pending.model = request.model_name();
    pending.version = request.model_version();
    door_.submit(std::move(http), std::move(pending));
  }

  // With the mutex held. A client that lets max_queued_responses pile up is not reading: the call
  // ends (overflow) rather than hold more.
  void write(inference::ModelStreamInferResponse response) {
    if (overflowed_) return;
    if (writes_.size() >= door_.options_.max_queued_responses) return overflow();
    writes_.push_back(std::move(response));
    if (writing_) return;
    writing_ = true;
    StartWrite(&writes_.front());
  }

  // With the mutex held: what is queued goes (but the response being written, which gRPC holds),
  // the requests in flight are cancelled in the pipeline (each is dropped from in_flight_ as its
  // cancel is through), and nothing more is read, answered or queued.
  void overflow() {
    spdlog::warn("grpc: a ModelStreamInfer client left {} responses unread; finishing its call",
                 writes_.size());
    overflowed_ = true;
    cancelled_ = true;
    if (writes_.size() > 1) writes_.erase(writes_.begin() + 1, writes_.end());
    for (const std::string& tag : in_flight_) door_.cancel(tag);
  }

  // Finish once nothing is left to read, answer or write. Finish is the last touch of `this`
  // (OnDone may delete it at once), so it is called after the mutex is let go.
  void finish_if_done(std::unique_lock<std::mutex>& lock) {
    // An overflowed call waits neither for the client to close its side nor for the response
    // gRPC is writing to it: it may never read or close (the status follows that response).
    if (finishing_ || !in_flight_.empty() || (!overflowed_ && (!reads_done_ || writing_))) return;
    finishing_ = true;
    const grpc::Status status =
        overflowed_ ? grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "resource_exhausted: the client did not read its responses: " +
                                       std::to_string(door_.options_.max_queued_responses) +
                                       " were queued (the limit); the call is closed")
        : cancelled_
            ? grpc::Status(grpc::StatusCode::CANCELLED, "cancelled: the call was cancelled")
            : grpc::Status::OK;
    lock.unlock();
    Finish(status);
  }

  GrpcFrontDoor& door_;
  grpc::CallbackServerContext* context_;
  inference::ModelInferRequest request_;  // the read in progress; gRPC's threads only

  std::mutex mutex_;                                        // guards everything below
  std::deque<inference::ModelStreamInferResponse> writes_;  // the front one is being written
  std::set<std::string> in_flight_;  // requests submitted without their final response yet
  bool writing_ = false;
  bool reads_done_ = false;
  bool cancelled_ = false;
  bool overflowed_ = false;  // max_queued_responses were reached: the call ends RESOURCE_EXHAUSTED
  bool finishing_ = false;
};

class GrpcFrontDoor::Service : public inference::GRPCInferenceService::CallbackService {
 public:
  explicit Service(GrpcFrontDoor& door) : door_(door) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return finished(context, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* response) override {
    return ready(context, "", response);
  }
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override {
    return guarded(context, "ModelReady", [&] { return model_ready(context, request, response); });
  }
  grpc::ServerUnaryReactor* model_ready(grpc::CallbackServerContext* context,
                                        const inference::ModelReadyRequest* request,
                                        inference::ModelReadyResponse* response) {
    const auto catalog = door_.catalog_.get();
    const auto model = kserve_grpc_model(*catalog, request->name(), request->version());
    if (auto* status = std::get_if<grpc::Status>(&model)) return finished(context, *status);
    return ready(context, catalog->key_of(std::get<config::ModelVersion>(model)), response);
  }
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* response) override {
    response->set_name("seqpipe");
    response->set_version("1");
    return finished(context, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override {
    return guarded(context, "ModelMetadata",
                   [&] { return model_metadata(context, request, response); });
  }
  grpc::ServerUnaryReactor* model_metadata(grpc::CallbackServerContext* context,
                                           const inference::ModelMetadataRequest* request,
                                           inference::ModelMetadataResponse* response) {
    const auto catalog = door_.catalog_.get();
    const auto model = kserve_grpc_model(*catalog, request->name(), request->version());
    if (auto* status = std::get_if<grpc::Status>(&model)) return finished(context, *status);
    const auto& found = std::get<config::ModelVersion>(model);
    const auto named =
        request->version().empty() ? std::nullopt : std::optional<uint32_t>(found.version);
    *response = kserve_grpc_metadata(*catalog, found.name, named);
    return finished(context, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override {
    return guarded(context, "ModelInfer", [&] { return model_infer(context, request, response); });
  }
  grpc::ServerUnaryReactor* model_infer(grpc::CallbackServerContext* context,
                                        const inference::ModelInferRequest* request,
                                        inference::ModelInferResponse* response) {
    const auto known =
        kserve_grpc_model(*door_.catalog_.get(), request->model_name(), request->model_version());
    if (auto* status = std::get_if<grpc::Status>(&known)) return finished(context, *status);
    const std::string tag = "grpc-" + std::to_string(door_.next_id_++);
    auto translated =
        kserve_grpc_request(*request, tag, deadline_ms(*context, door_.options_.max_timeout));
    if (auto* status = std::get_if<grpc::Status>(&translated)) return finished(context, *status);
    auto* reactor = new InferReactor([door = &door_, tag] { door->cancel(tag); });
    Pending pending;
    pending.reactor = reactor;
    pending.response = response;
    pending.model = request->model_name();
    pending.version = request->model_version();
    door_.submit(std::move(std::get<HttpRequest>(translated)), std::move(pending));
    return reactor;
  }
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override {
    return new Stream(door_, context);
  }

 private:
  // A unary call's handler inside the one boundary: one that throws finishes the call INTERNAL.
  // Every handler's last step is the one that finishes or hands the call over, so a throw comes
  // before the call is finished or handed over.
  template <class Handler>
  grpc::ServerUnaryReactor* guarded(grpc::CallbackServerContext* context, std::string_view what,
                                    Handler&& handler) {
    grpc::ServerUnaryReactor* reactor = nullptr;
    guard_handler(
        door_.options_.metrics, Door::kGrpc, what, [&] { reactor = handler(); },
        [&] { reactor = finished(context, internal_status()); });
    return reactor;
  }
  static grpc::ServerUnaryReactor* finished(grpc::CallbackServerContext* context,
                                            const grpc::Status& status) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }
  template <class Response>
  grpc::ServerUnaryReactor* ready(grpc::CallbackServerContext* context, std::string key,
                                  Response* response) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    door_.ask_ready(std::move(key), [reactor, response](bool ready) {
      response->set_ready(ready);
      reactor->Finish(grpc::Status::OK);
    });
    return reactor;
  }

  GrpcFrontDoor& door_;
};

GrpcFrontDoor::GrpcFrontDoor(GrpcOptions options, const SharedCatalog& catalog,
                             std::function<bool(const std::string&)> ready)
    : options_(std::move(options)),
      catalog_(catalog),
      ready_(std::move(ready)),
      wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      last_expiry_(Clock::now()) {
  if (wake_fd_ < 0) throw std::runtime_error("grpc: eventfd failed");
  service_ = std::make_unique<Service>(*this);
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second gateway on the same port would share it silently
  // instead of being told the port is taken.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
  builder.AddListeningPort(options_.host + ":" + std::to_string(options_.port),
                           grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    ::close(wake_fd_);
    throw config::ConfigError("gateway.grpc_endpoint: " + options_.host + ":" +
                              std::to_string(options_.port) + " " +
                              transport::tcp_bind_problem(options_.host, options_.port));
  }
  probe_thread_ = std::thread([this] { probe_loop(); });
}

GrpcFrontDoor::~GrpcFrontDoor() {
  // Nothing is handed over from now on (submit answers unavailable); what was handed over and
  // what the gateway has not answered is answered unavailable here, so that Shutdown, which
  // cancels the calls still open and returns once every one is done, has nothing to wait for
  // from the gateway's thread (this one).
  std::vector<Task> left;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    left.swap(posted_);
  }
  probe_wake_.notify_all();
  const ToGateway nowhere = [](Submission&&) {};
  for (auto& task : left) task(nowhere);
  for (const auto& [tag, pending] : pending_) {
    fail(tag, pending, {grpc::StatusCode::UNAVAILABLE, "unavailable: the gateway is stopping"});
  }
  pending_.clear();
  server_->Shutdown(std::chrono::system_clock::now());
  probe_thread_.join();
  ::close(wake_fd_);
}

void GrpcFrontDoor::wake() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void GrpcFrontDoor::submit(HttpRequest request, Pending p) {
  const auto wait = (request.timeout_ms ? std::chrono::milliseconds(*request.timeout_ms)
                                        : options_.default_timeout) +
                    kReplyMargin;
  p.client_id = request.client_id;
  p.give_up = Clock::now() + wait;
  std::unique_lock lock(mutex_);
  if (stopping_) {
    lock.unlock();
    return fail(request.internal_id, p,
                {grpc::StatusCode::UNAVAILABLE, "unavailable: the gateway is stopping"});
  }
  posted_.emplace_back(
      [this, request = std::move(request), p = std::move(p)](const ToGateway& to_gateway) mutable {
        start(std::move(request), std::move(p), to_gateway);
      });
  lock.unlock();
  wake();
}

void GrpcFrontDoor::cancel(std::string tag) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;  // the destructor answers every call
    posted_.emplace_back(
        [this, tag = std::move(tag)](const ToGateway& to_gateway) { on_cancel(tag, to_gateway); });
  }
  wake();
}

void GrpcFrontDoor::start(HttpRequest request, Pending pending, const ToGateway& to_gateway) {
  // On the gateway's thread the catalog is the one the gateway resolves the request by, at once:
  // the version found here is the one that runs it (one not found is answered not_found there).
  guard_handler(
      options_.metrics, Door::kGrpc, "the model of " + request.internal_id,
      [&] {
        const auto model = kserve_grpc_model(*catalog_.get(), pending.model, pending.version);
        if (const auto* found = std::get_if<config::ModelVersion>(&model)) {
          pending.model = found->name;
          pending.version = std::to_string(found->version);
        }
      },
      [] {});  // the call's own names then
  const std::string tag = request.internal_id;
  pending_.emplace(tag, std::move(pending));
  to_gateway({typed_request(request, catalog_),
              [this, tag](protocol::Reply&& reply) { on_reply(tag, reply); }});
}

void GrpcFrontDoor::serve(const ToGateway& to_gateway) {
  uint64_t count = 0;
  (void)!::read(wake_fd_, &count, sizeof count);
  std::vector<Task> tasks;
  {
    std::lock_guard lock(mutex_);
    tasks.swap(posted_);
  }
  for (auto& task : tasks) task(to_gateway);
}

void GrpcFrontDoor::on_reply(const std::string& tag, const protocol::Reply& reply) {
  auto it = pending_.find(tag);
  if (it == pending_.end()) return;  // a late reply: the call was given up or cancelled
  const Pending& pending = it->second;
  const ResponseModel model{pending.model, pending.version};
  // The translation runs inside the one boundary; the call is answered whatever it does.
  if (pending.stream != nullptr) {
    KserveStreamReply out;
    guard_handler(
        options_.metrics, Door::kGrpc, "the reply to " + tag,
        [&] { out = kserve_grpc_stream_reply(reply, pending.client_id, model, pending.streamed); },
        [&] {
          out = {kserve_grpc_stream_error(internal_status(), pending.client_id, model), true};
        });
    pending.stream->deliver(std::move(out.response), tag, out.final);
    if (out.final) pending_.erase(it);
    return;
  }
  std::variant<inference::ModelInferResponse, grpc::Status> answer = internal_status();
  guard_handler(
      options_.metrics, Door::kGrpc, "the reply to " + tag,
      [&] { answer = kserve_grpc_reply(reply, pending.client_id, model); }, [] {});
  Pending p = std::move(it->second);
  pending_.erase(it);
  if (auto* status = std::get_if<grpc::Status>(&answer)) return p.reactor->Finish(*status);
  *p.response = std::move(std::get<inference::ModelInferResponse>(answer));
  p.reactor->Finish(grpc::Status::OK);
}

void GrpcFrontDoor::on_cancel(const std::string& tag, const ToGateway& to_gateway) {
  auto it = pending_.find(tag);
  if (it == pending_.end()) return;  // already answered: nothing to stop
  spdlog::info("grpc: call {} was cancelled by its client or its deadline; cancelling it", tag);
  // Forgotten first: the gateway answers the cancelled request at once, through its sink, which
  // then finds nothing to answer.
  const Pending p = std::move(it->second);
  pending_.erase(it);
  protocol::Request cancel;
  cancel.op = protocol::Op::kCancel;
  cancel.id = tag;
  to_gateway({std::move(cancel), [](protocol::Reply&&) {}});  // a cancel has no reply
  if (p.stream != nullptr) {
    p.stream->drop(tag);
  } else {
    p.reactor->Finish({grpc::StatusCode::CANCELLED, "cancelled: the call was cancelled"});
  }
}

void GrpcFrontDoor::fail(const std::string& tag, const Pending& pending,
                         const grpc::Status& status) {
  if (pending.stream != nullptr) {
    pending.stream->deliver(
        kserve_grpc_stream_error(status, pending.client_id, {pending.model, pending.version}), tag,
        true);
  } else {
    pending.reactor->Finish(status);
  }
}

void GrpcFrontDoor::expire(Clock::time_point now) {
  if (now - last_expiry_ < kRound) return;
  last_expiry_ = now;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now < it->second.give_up) {
      ++it;
      continue;
    }
    spdlog::warn("grpc: no reply from the gateway for {} in time", it->first);
    fail(it->first, it->second,
         {grpc::StatusCode::UNAVAILABLE, "unavailable: no reply from the gateway in time"});
    it = pending_.erase(it);
  }
}

void GrpcFrontDoor::ask_ready(std::string key, std::function<void(bool)> answer) {
  {
    std::lock_guard lock(mutex_);
    ready_waiting_.emplace_back(std::move(key), std::move(answer));
  }
  probe_wake_.notify_one();
}

void GrpcFrontDoor::probe_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    probe_wake_.wait(lock, [this] { return !ready_waiting_.empty() || stopping_; });
    // Asked during a shutdown: not ready (gRPC waits for these calls to finish).
    const bool stopping = stopping_;
    std::vector<std::pair<std::string, std::function<void(bool)>>> waiting;
    waiting.swap(ready_waiting_);
    lock.unlock();
    // One probe per model version answers everyone who asked about it meanwhile.
    std::map<std::string, bool> ready;
    for (auto& [key, answer] : waiting) {
      auto it = ready.find(key);
      if (it == ready.end()) {
        bool is_ready = false;  // a probe that throws (the pipeline could not be asked): not ready
        guard_handler(
            options_.metrics, Door::kGrpc, "the readiness probe of '" + key + "'",
            [&] { is_ready = !stopping && ready_(key); }, [] {});
        it = ready.emplace(key, is_ready).first;
      }
      answer(it->second);
    }
    if (stopping) return;
    lock.lock();
  }
}

}  // namespace seqpipe::gateway
