#include "seqpipe/observability/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <stdexcept>

#include "seqpipe/config/config.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::metrics {

namespace {
const std::vector<double> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128};
constexpr protocol::ErrorCode kCodes[] = {
    protocol::ErrorCode::kInvalidArgument,  protocol::ErrorCode::kTooLong,
    protocol::ErrorCode::kDeadlineExceeded, protocol::ErrorCode::kOverloaded,
    protocol::ErrorCode::kInternal,         protocol::ErrorCode::kUnavailable,
    protocol::ErrorCode::kCancelled,        protocol::ErrorCode::kNotFound};
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

std::shared_ptr<prometheus::Registry> make_registry() {
  return std::make_shared<prometheus::Registry>();
}

Exporter::Exporter(std::string_view service, int port, int tries, std::string_view address)
    : registry_(make_registry()) {
  for (int i = 0; i < (port == 0 ? 1 : tries) && !exposer_; ++i) {
    try {
      exposer_ = std::make_unique<prometheus::Exposer>(std::string(address) + ":" +
                                                       std::to_string(port + i));
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
  prometheus::BuildGauge()
      .Name(std::string(kBuildInfo))
      .Help("Always 1; the labels say what runs")
      .Register(*registry_)
      .Add({{"service", std::string(service)}, {"version", "0.1.0"}})
      .Set(1);
}

Exporter::~Exporter() = default;

prometheus::Labels model_labels(const std::string& model_key) {
  const size_t slash = model_key.rfind('/');
  if (model_key.empty() || slash == std::string::npos) return {};
  return {{"model", model_key.substr(0, slash)}, {"version", model_key.substr(slash + 1)}};
}

StageMetrics StageMetrics::for_model(const std::string& model_key) const {
  return StageMetrics(registry_, labels_.at("stage"), model_labels(model_key));
}

StageMetrics::StageMetrics(prometheus::Registry& r, std::string_view stage_name,
                           const prometheus::Labels& model)
    : registry_(r), labels_(model) {
  labels_["stage"] = std::string(stage_name);
  const prometheus::Labels& stage = labels_;
  requests_ = &prometheus::BuildCounter()
                   .Name(std::string(kRequests))
                   .Help("Work items received")
                   .Register(r)
                   .Add(stage);
  auto& errors = prometheus::BuildCounter()
                     .Name(std::string(kErrors))
                     .Help("Work items failed, by error code")
                     .Register(r);
  for (protocol::ErrorCode code : kCodes) {
    prometheus::Labels labels = stage;
    labels["code"] = std::string(protocol::wire_name(code));
    errors_.push_back(&errors.Add(labels));
  }
  malformed_ = &prometheus::BuildCounter()
                    .Name(std::string(kMalformed))
                    .Help("Messages dropped because they did not decode")
                    .Register(r)
                    .Add(stage);
  late_ =
      &prometheus::BuildCounter()
           .Name(std::string(kLate))
           .Help("Items from a worker already declared dead, dropped (their work went elsewhere)")
           .Register(r)
           .Add(stage);
  duplicates_ = &prometheus::BuildCounter()
                     .Name(std::string(kDuplicates))
                     .Help("Items that arrived a second time (submitted again), dropped")
                     .Register(r)
                     .Add(stage);
  dead_ = &prometheus::BuildCounter()
               .Name(std::string(kWorkersDead))
               .Help("Workers declared dead: missed heartbeats or unreachable")
               .Register(r)
               .Add(stage);
  redispatched_ = &prometheus::BuildCounter()
                       .Name(std::string(kRedispatched))
                       .Help("Items a dead worker held, given to another replica")
                       .Register(r)
                       .Add(stage);
  cancelled_ = &prometheus::BuildCounter()
                    .Name(std::string(kCancelled))
                    .Help("Work items dropped because their client cancelled the request")
                    .Register(r)
                    .Add(stage);
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
  heartbeats_missed_ = &prometheus::BuildCounter()
                            .Name(std::string(kHeartbeatsMissed))
                            .Help("Heartbeat intervals in which a worker sent the hub nothing")
                            .Register(r)
                            .Add(stage);
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

SecurityMetrics::SecurityMetrics(prometheus::Registry& r, std::string_view hub) {
  refused_ = &prometheus::BuildCounter()
                  .Name(std::string(kSecurityRefusals))
                  .Help("CurveZMQ connections refused: client key not in the allow list, or none")
                  .Register(r)
                  .Add({{"hub", std::string(hub)}});
}

void SecurityMetrics::refused() {
  refused_->Increment();
}

}  // namespace seqpipe::metrics
