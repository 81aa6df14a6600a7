#include "seqpipe/observability/metrics.h"

#include <CivetServer.h>
#include <civetweb.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstring>
#include <map>
#include <stdexcept>

#include "seqpipe/config/config_error.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::metrics {

namespace {
const std::vector<double> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128};
constexpr protocol::ErrorCode kCodes[] = {
    protocol::ErrorCode::kInvalidArgument,  protocol::ErrorCode::kTooLong,
    protocol::ErrorCode::kDeadlineExceeded, protocol::ErrorCode::kOverloaded,
    protocol::ErrorCode::kInternal,         protocol::ErrorCode::kUnavailable,
    protocol::ErrorCode::kCancelled,        protocol::ErrorCode::kNotFound};

// A counter of one stage (`labels`) in `r`.
prometheus::Counter& stage_counter(prometheus::Registry& r, std::string_view name, const char* help,
                                   const prometheus::Labels& labels) {
  return prometheus::BuildCounter().Name(std::string(name)).Help(help).Register(r).Add(labels);
}
}  // namespace

namespace {
std::vector<double> g_latency_buckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                         0.05,   0.1,     0.25,   0.5,   1,      2.5,   5};
}  // namespace

std::vector<double> latency_buckets() {
  return g_latency_buckets;
}

void set_latency_buckets(const std::vector<int>& bounds_us) {
  g_latency_buckets.clear();
  for (int us : bounds_us) g_latency_buckets.push_back(us / 1e6);
}

void Readiness::set(bool ready, std::string_view why) {
  const std::lock_guard lock(mutex_);
  ready_ = ready;
  why_ = ready ? "" : std::string(why);
}

std::pair<bool, std::string> Readiness::get() const {
  const std::lock_guard lock(mutex_);
  return {ready_, why_};
}

namespace {

// The readiness each serving port answers: civetweb's request callback is a plain function, and
// the user data it could reach is prometheus-cpp's server. A process has one exporter; tests
// make several, each on its own port.
std::mutex g_probes_mutex;
std::map<int, std::weak_ptr<Readiness>> g_probes;

void register_probe(int port, std::weak_ptr<Readiness> readiness) {
  const std::lock_guard lock(g_probes_mutex);
  g_probes[port] = std::move(readiness);
}

void unregister_probe(int port) {
  const std::lock_guard lock(g_probes_mutex);
  g_probes.erase(port);
}

int answer(mg_connection* connection, int status, const std::string& body) {
  mg_printf(connection,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n%s",
            status, status == 200 ? "OK" : "Service Unavailable", body.size(), body.c_str());
  return status;
}

// civetweb's begin_request: answers /healthz and /ready itself (a status code: handled), leaves
// anything else (/metrics) to prometheus-cpp (0).
int answer_probe(mg_connection* connection) {
  const mg_request_info* request = mg_get_request_info(connection);
  if (request == nullptr || request->local_uri == nullptr) return 0;
  const std::string_view path(request->local_uri);
  if (path == kHealthPath) return answer(connection, 200, "ok\n");
  if (path != kReadyPath) return 0;
  std::shared_ptr<Readiness> readiness;
  {
    const std::lock_guard lock(g_probes_mutex);
    auto it = g_probes.find(request->server_port);
    if (it != g_probes.end()) readiness = it->second.lock();
  }
  if (!readiness) return answer(connection, 503, "starting\n");
  const auto [ready, why] = readiness->get();
  return ready ? answer(connection, 200, "ready\n") : answer(connection, 503, why + "\n");
}

}  // namespace

std::shared_ptr<prometheus::Registry> make_registry() {
  return std::make_shared<prometheus::Registry>();
}

Exporter::Exporter(std::string_view service, int port, int tries, std::string_view address)
    : readiness_(std::make_shared<Readiness>()), registry_(make_registry()) {
  CivetCallbacks callbacks;  // copied by the server
  callbacks.begin_request = answer_probe;
  for (int i = 0; i < (port == 0 ? 1 : tries) && !exposer_; ++i) {
    try {
      exposer_ = std::make_unique<prometheus::Exposer>(
          std::string(address) + ":" + std::to_string(port + i), 2, &callbacks);
    } catch (const std::exception&) {
      // the port is taken (a replica takes the next one); the error below says why
    }
  }
  if (!exposer_) {
    // prometheus-cpp's message ("null context when constructing CivetServer") does not say why:
    // the config key (the service is its section) and what a bind of our own says do.
    const std::string host(address);
    const int last = port == 0 ? 0 : port + tries - 1;
    const std::string ports =
        last == port ? std::to_string(port) : std::to_string(port) + "-" + std::to_string(last);
    throw config::ConfigError(std::string(service) + ".metrics_port: " + host + ":" + ports + " " +
                              transport::tcp_bind_problem(host, last));
  }
  exposer_->RegisterCollectable(registry_);
  const auto ports = exposer_->GetListeningPorts();
  port_ = ports.empty() ? port : ports.front();
  register_probe(port_, readiness_);
  prometheus::BuildGauge()
      .Name(std::string(kBuildInfo))
      .Help("Always 1; the labels say what runs")
      .Register(*registry_)
      .Add({{"service", std::string(service)}, {"version", "0.1.0"}})
      .Set(1);
}

Exporter::~Exporter() {
  unregister_probe(port_);
}

prometheus::Labels model_labels(const std::string& model_key) {
  const size_t slash = model_key.rfind('/');
  if (model_key.empty() || slash == std::string::npos) return {};
  return {{"model", model_key.substr(0, slash)}, {"version", model_key.substr(slash + 1)}};
}

StageMetrics StageMetrics::for_model(const std::string& model_key) const {
  return StageMetrics(registry_, labels_.at("stage"), model_labels(model_key));
}

StageQueueMetrics StageMetrics::queue_for(std::string_view worker_stage) const {
  prometheus::Labels model = labels_;
  model.erase("stage");
  return StageQueueMetrics(registry_, worker_stage, model);
}

StageMetrics::StageMetrics(prometheus::Registry& r, std::string_view stage_name,
                           const prometheus::Labels& model)
    : registry_(r), labels_(model) {
  labels_["stage"] = std::string(stage_name);
  const prometheus::Labels& stage = labels_;
  requests_ = &stage_counter(r, kRequests, "Work items received", stage);
  auto& errors = prometheus::BuildCounter()
                     .Name(std::string(kErrors))
                     .Help("Work items failed, by error code")
                     .Register(r);
  for (protocol::ErrorCode code : kCodes) {
    prometheus::Labels labels = stage;
    labels["code"] = std::string(protocol::wire_name(code));
    errors_.push_back(&errors.Add(labels));
  }
  malformed_ = &stage_counter(r, kMalformed, "Messages dropped because they did not decode", stage);
  late_ = &stage_counter(
      r, kLate, "Items from a worker already declared dead, dropped (their work went elsewhere)",
      stage);
  duplicates_ = &stage_counter(
      r, kDuplicates, "Items that arrived a second time (submitted again), dropped", stage);
  dead_ = &stage_counter(r, kWorkersDead, "Workers declared dead: missed heartbeats or unreachable",
                         stage);
  redispatched_ =
      &stage_counter(r, kRedispatched, "Items a dead worker held, given to another replica", stage);
  drained_ =
      &stage_counter(r, kWorkersDrained,
                     "Workers that withdrew their credit to leave (drained on SIGTERM)", stage);
  cancelled_ = &stage_counter(
      r, kCancelled, "Work items dropped because their client cancelled the request", stage);
  auto& expired = prometheus::BuildCounter()
                      .Name(std::string(kExpired))
                      .Help("Work items dropped for their deadline: before compute, or during it")
                      .Register(r);
  for (auto [when, counter] :
       {std::pair{"queued", &expired_queued_}, std::pair{"computing", &expired_computing_}}) {
    prometheus::Labels labels = stage;
    labels["when"] = when;
    *counter = &expired.Add(labels);
  }
  heartbeats_missed_ = &stage_counter(
      r, kHeartbeatsMissed, "Heartbeat intervals in which a worker sent the hub nothing", stage);
  queue_ = &prometheus::BuildHistogram()
                .Name(std::string(kQueueSeconds))
                .Help("Time a work item waited in this stage before compute")
                .Register(r)
                .Add(stage, latency_buckets());
  compute_ = &prometheus::BuildHistogram()
                  .Name(std::string(kComputeSeconds))
                  .Help("Compute time of one unit of work (item or batch)")
                  .Register(r)
                  .Add(stage, latency_buckets());
  batch_ = &prometheus::BuildHistogram()
                .Name(std::string(kBatchSize))
                .Help("Items per batch (engine stages)")
                .Register(r)
                .Add(stage, kBatchBuckets);
  in_flight_ = &prometheus::BuildGauge()
                    .Name(std::string(kInFlight))
                    .Help("Work items being processed")
                    .Register(r)
                    .Add(stage);
  queue_depth_ = &prometheus::BuildGauge()
                      .Name(std::string(kQueueDepth))
                      .Help("Work items waiting")
                      .Register(r)
                      .Add(stage);
}

void StageMetrics::request(double n) {
  requests_->Increment(n);
}
void StageMetrics::error(protocol::ErrorCode code) {
  errors_[static_cast<size_t>(code)]->Increment();
}
void StageMetrics::malformed() {
  malformed_->Increment();
}
void StageMetrics::late(double n) {
  late_->Increment(n);
}
void StageMetrics::duplicate() {
  duplicates_->Increment();
}
void StageMetrics::worker_dead() {
  dead_->Increment();
}
void StageMetrics::redispatched(double n) {
  redispatched_->Increment(n);
}
void StageMetrics::drained() {
  drained_->Increment();
}
void StageMetrics::heartbeats_missed(double n) {
  heartbeats_missed_->Increment(n);
}
void StageMetrics::cancelled(double n) {
  cancelled_->Increment(n);
}

void StageMetrics::expired_before_compute(double n) {
  expired_queued_->Increment(n);
}

void StageMetrics::expired_computing(double n) {
  expired_computing_->Increment(n);
}
void StageMetrics::queue_time(double s) {
  queue_->Observe(s);
}
void StageMetrics::compute_time(double s) {
  compute_->Observe(s);
}
void StageMetrics::batch_size(double n) {
  batch_->Observe(n);
}
void StageMetrics::set_in_flight(double n) {
  in_flight_->Set(n);
}
void StageMetrics::set_queue_depth(double n) {
  queue_depth_->Set(n);
}

void StageMetrics::set_kv_slots(int used, int free) {
  if (kv_used_ == nullptr) {
    auto& slots = prometheus::BuildGauge()
                      .Name(std::string(kKvSlots))
                      .Help("Decoder KV-cache slots (one per sequence or beam), by state")
                      .Register(registry_);
    prometheus::Labels in_use = labels_, unused = labels_;
    in_use["state"] = "used";
    unused["state"] = "free";
    kv_used_ = &slots.Add(in_use);
    kv_free_ = &slots.Add(unused);
  }
  kv_used_->Set(used);
  kv_free_->Set(free);
}

void StageMetrics::engine_info(std::string_view compute_type) {
  prometheus::BuildGauge()
      .Name(std::string(kEngineInfo))
      .Help("1, labelled with the engine's compute type in use")
      .Register(registry_)
      .Add([&] {
        prometheus::Labels labels = labels_;
        labels["compute_type"] = std::string(compute_type);
        return labels;
      }())
      .Set(1);
}

GatewayMetrics::GatewayMetrics(prometheus::Registry& r)
    : requests_(
          &prometheus::BuildHistogram()
               .Name(std::string(kRequestSeconds))
               .Help("End-to-end request latency at the gateway (receive to reply), by status")
               .Register(r)),
      model_(&prometheus::BuildHistogram()
                  .Name(std::string(kModelSeconds))
                  .Help("Model latency of ok requests: encode + decode time")
                  .Register(r)),
      overhead_(&prometheus::BuildHistogram()
                     .Name(std::string(kOverheadSeconds))
                     .Help("Overhead latency of ok requests: end to end minus model latency")
                     .Register(r)) {
  latencies("");  // a pipeline's series exist from the start, as before any request
  late_ = &prometheus::BuildCounter()
               .Name(std::string(kLateResults))
               .Help("Results that arrived after their request was answered (dropped)")
               .Register(r)
               .Add({});
  auto& cache = prometheus::BuildCounter()
                    .Name(std::string(kCacheLookups))
                    .Help("Response cache lookups (one per text), by result")
                    .Register(r);
  cache_hits_ = &cache.Add({{"result", "hit"}});
  cache_misses_ = &cache.Add({{"result", "miss"}});
  auto& cancels = prometheus::BuildCounter()
                      .Name(std::string(kCancels))
                      .Help(
                          "Cancel requests from clients, by outcome (cancelled: a request in "
                          "flight was answered "
                          "cancelled; not_found: it had been answered already)")
                      .Register(r);
  cancels_found_ = &cancels.Add({{"outcome", "cancelled"}});
  cancels_not_found_ = &cancels.Add({{"outcome", "not_found"}});
}

const GatewayMetrics::Latencies& GatewayMetrics::latencies(const std::string& model_key) {
  auto it = by_model_.find(model_key);
  if (it != by_model_.end()) return it->second;
  const prometheus::Labels model = model_labels(model_key);
  auto with_status = [&](const char* status) {
    prometheus::Labels labels = model;
    labels["status"] = status;
    return &requests_->Add(labels, latency_buckets());
  };
  Latencies l{with_status("ok"), with_status("error"), &model_->Add(model, latency_buckets()),
              &overhead_->Add(model, latency_buckets())};
  return by_model_.emplace(model_key, l).first->second;
}

void GatewayMetrics::request_seconds(bool ok, double s, const std::string& model_key) {
  const Latencies& l = latencies(model_key);
  (ok ? l.ok : l.error)->Observe(s);
}
void GatewayMetrics::latency_split(double model_s, double overhead_s,
                                   const std::string& model_key) {
  const Latencies& l = latencies(model_key);
  l.model->Observe(model_s);
  l.overhead->Observe(overhead_s);
}
void GatewayMetrics::late_result() {
  late_->Increment();
}
void GatewayMetrics::cache_lookup(bool hit) {
  (hit ? cache_hits_ : cache_misses_)->Increment();
}
void GatewayMetrics::cancel(bool found) {
  (found ? cancels_found_ : cancels_not_found_)->Increment();
}

StageQueueMetrics::StageQueueMetrics(prometheus::Registry& r, std::string_view stage,
                                     const prometheus::Labels& model) {
  prometheus::Labels labels = model;
  labels["stage"] = std::string(stage);
  depth_ = &prometheus::BuildGauge()
                .Name(std::string(kStageQueueItems))
                .Help("Items waiting in the batcher for this worker stage's credit")
                .Register(r)
                .Add(labels);
  wait_ = &prometheus::BuildGauge()
               .Name(std::string(kStageQueueWait))
               .Help("How long the oldest item waiting for this worker stage has waited")
               .Register(r)
               .Add(labels);
}

void StageQueueMetrics::set(double depth, double oldest_wait_seconds) {
  depth_->Set(depth);
  wait_->Set(oldest_wait_seconds);
}

SecurityMetrics::SecurityMetrics(prometheus::Registry& r, std::string_view hub) {
  refused_ = &prometheus::BuildCounter()
                  .Name(std::string(kSecurityRefusals))
                  .Help("CurveZMQ connections refused: client key not in the allow list, or none")
                  .Register(r)
                  .Add({{"hub", std::string(hub)}});
}

FrontDoorMetrics::FrontDoorMetrics(prometheus::Registry& r) {
  auto& family = prometheus::BuildCounter()
                     .Name(std::string(kHandlerExceptions))
                     .Help("Exceptions a front door's handler threw (answered as internal errors)")
                     .Register(r);
  http_ = &family.Add({{"door", "http"}});
  grpc_ = &family.Add({{"door", "grpc"}});
}

void FrontDoorMetrics::handler_exception(Door door) {
  (door == Door::kHttp ? http_ : grpc_)->Increment();
}

double FrontDoorMetrics::handler_exceptions(Door door) const {
  return (door == Door::kHttp ? http_ : grpc_)->Value();
}

void SecurityMetrics::refused() {
  refused_->Increment();
}

}  // namespace seqpipe::metrics
