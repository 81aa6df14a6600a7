#pragma once
// Prometheus metrics: every metric name in one place, one exporter per process serving /metrics,
// and the families every stage exports declared in one constructor (handles resolved once, no
// string lookups per request). Histograms, not summaries: they aggregate across replicas.
// docs/METRICS.md lists the names.
#include <prometheus/labels.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "seqpipe/protocol/protocol.h"

namespace prometheus {
class Exposer;
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace seqpipe::metrics {

// Names (base units, _total for counters, seqpipe_ prefix).
inline constexpr std::string_view kBuildInfo = "seqpipe_build_info";
inline constexpr std::string_view kRequests = "seqpipe_stage_requests_total";
inline constexpr std::string_view kErrors = "seqpipe_stage_errors_total";
inline constexpr std::string_view kMalformed = "seqpipe_stage_malformed_messages_total";
inline constexpr std::string_view kLate = "seqpipe_stage_late_items_total";
inline constexpr std::string_view kDuplicates = "seqpipe_stage_duplicate_items_total";
inline constexpr std::string_view kWorkersDead = "seqpipe_hub_workers_declared_dead_total";
inline constexpr std::string_view kRedispatched = "seqpipe_hub_items_redispatched_total";
inline constexpr std::string_view kHeartbeatsMissed = "seqpipe_hub_heartbeats_missed_total";
inline constexpr std::string_view kCancelled = "seqpipe_stage_cancelled_items_total";
inline constexpr std::string_view kExpired = "seqpipe_stage_expired_items_total";
inline constexpr std::string_view kQueueSeconds = "seqpipe_stage_queue_seconds";
inline constexpr std::string_view kComputeSeconds = "seqpipe_stage_compute_seconds";
inline constexpr std::string_view kBatchSize = "seqpipe_stage_batch_size";
inline constexpr std::string_view kInFlight = "seqpipe_stage_in_flight";
inline constexpr std::string_view kQueueDepth = "seqpipe_stage_queue_depth";
inline constexpr std::string_view kRequestSeconds = "seqpipe_gateway_request_seconds";
inline constexpr std::string_view kLateResults = "seqpipe_gateway_late_results_total";
inline constexpr std::string_view kModelSeconds = "seqpipe_gateway_model_latency_seconds";
inline constexpr std::string_view kOverheadSeconds = "seqpipe_gateway_overhead_latency_seconds";
inline constexpr std::string_view kCacheLookups = "seqpipe_gateway_cache_lookups_total";
inline constexpr std::string_view kKvSlots = "seqpipe_decoder_kv_slots";
inline constexpr std::string_view kCancels = "seqpipe_gateway_cancels_total";
inline constexpr std::string_view kEngineInfo = "seqpipe_engine_info";
inline constexpr std::string_view kSecurityRefusals = "seqpipe_security_refusals_total";
inline constexpr std::string_view kHandlerExceptions = "seqpipe_gateway_handler_exceptions_total";
inline constexpr std::string_view kWorkersDrained = "seqpipe_hub_workers_drained_total";
inline constexpr std::string_view kStageQueueItems = "seqpipe_batcher_stage_queue_depth";
inline constexpr std::string_view kStageQueueWait = "seqpipe_batcher_stage_queue_wait_seconds";

// The paths every process's metrics port answers besides /metrics, for orchestrators' probes
// (docs/DEPLOY.md): alive (the process runs and its HTTP thread answers: 200), and ready (200 once
// the process serves its part, 503 with the reason before and while it drains).
inline constexpr std::string_view kHealthPath = "/healthz";
inline constexpr std::string_view kReadyPath = "/ready";

// The bucket bounds (seconds) every latency histogram of this process gets: 100 us .. 5 s until
// set_latency_buckets() (run_service_main calls it with metrics.latency_buckets_us, before any
// metric is built). Histograms built earlier keep their buckets.
std::vector<double> latency_buckets();
void set_latency_buckets(const std::vector<int>& bounds_us);

// Ports a worker replica tries from its stage's metrics_port (replica i of a stage gets
// metrics_port + i when they start in order).
inline constexpr int kReplicaPortRange = 64;

// Whether a process is ready, as its metrics port's /ready answers it. Thread-safe: the process's
// loop sets it, the HTTP server's threads read it.
class Readiness {
 public:
  // Ready from now on (200), or not with `why` (503, its body).
  void set(bool ready, std::string_view why = "");
  // (ready, why not): a copy taken under the lock.
  std::pair<bool, std::string> get() const;

 private:
  mutable std::mutex mutex_;
  bool ready_ = false;
  std::string why_ = "starting";
};

// A registry not served over HTTP (unit tests of the stages).
std::shared_ptr<prometheus::Registry> make_registry();

// Serves /metrics, /healthz and /ready for this process on `address` (an IPv4 address: 127.0.0.1,
// 0.0.0.0). port 0: any free port (see port()). Otherwise the first free port of [port, port +
// tries): replicas started with the same config take metrics_port, metrics_port + 1, ... in start
// order. Throws std::runtime_error when none is free.
class Exporter {
 public:
  Exporter(std::string_view service, int port, int tries = 1,
           std::string_view address = "127.0.0.1");
  ~Exporter();
  int port() const { return port_; }
  prometheus::Registry& registry() { return *registry_; }
  // What /ready answers (not ready, "starting", until the process says otherwise).
  Readiness& readiness() { return *readiness_; }

 private:
  std::shared_ptr<Readiness> readiness_;  // before the server that reads it
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  int port_ = 0;
};

// The labels of a replica serving model version `model_key` ("name/version"): model and
// version; none for "" (a pipeline's one model).
prometheus::Labels model_labels(const std::string& model_key);

// A batcher's queue in front of one worker stage ("encoder": sequences waiting to be batched,
// "decoder": encoded sequences waiting for KV-cache slots, "postprocessor"), labelled
// stage="<stage>" and the model version as model_labels: what autoscalers scale that stage on
// (deploy/k8s's KEDA ScaledObjects).
class StageQueueMetrics {
 public:
  StageQueueMetrics(prometheus::Registry& registry, std::string_view stage,
                    const prometheus::Labels& model = {});
  // Items waiting now, and how long the oldest of them has waited (0 when none).
  void set(double depth, double oldest_wait_seconds);

 private:
  prometheus::Gauge* depth_;
  prometheus::Gauge* wait_;
};

// What every stage counts, labelled stage="<name>" and, for a replica serving a repository's
// model version, model="<name>" and version="<v>" (model_labels).
class StageMetrics {
 public:
  StageMetrics(prometheus::Registry& registry, std::string_view stage,
               const prometheus::Labels& model = {});
  // The same stage's metrics for the items of one model version (model_key "name/version"),
  // labelled as model_labels says, in the same registry: a hub's per-version figures.
  StageMetrics for_model(const std::string& model_key) const;
  // A hub's queue in front of worker stage `worker_stage`, with this stage's model labels.
  StageQueueMetrics queue_for(std::string_view worker_stage) const;

  void request(double n = 1);
  void error(protocol::ErrorCode code);  // by wire code
  void malformed();
  // Items that came from a worker after it was declared dead (their work went elsewhere).
  void late(double n = 1);
  // Items that arrived a second time (a gateway submitted them again after a restart), dropped.
  void duplicate();
  // Hubs: a worker missed its heartbeats (or could not be reached); items given to another replica.
  void worker_dead();
  void redispatched(double n = 1);
  // Hubs: a worker withdrew its credit to leave (a drain, on SIGTERM); its work in hand comes back
  // as answers, not as re-dispatches.
  void drained();
  void heartbeats_missed(double n);
  // Work items dropped because their request was cancelled by its client (a decoder: sequences
  // stopped, their KV-cache slots freed).
  void cancelled(double n = 1);
  // Work items whose deadline passed, or could not be met, dropped before any compute on them
  // (`when`="queued"), or stopped while being computed, the compute spent for nothing
  // (`when`="computing": a decoder's sequence stopped between steps).
  void expired_before_compute(double n = 1);
  void expired_computing(double n = 1);
  void queue_time(double seconds);
  void compute_time(double seconds);
  void batch_size(double size);
  void set_in_flight(double n);
  void set_queue_depth(double n);
  // Decoders: KV-cache slots in use and free (the gauges appear on the first call).
  void set_kv_slots(int used, int free);
  // Encoders and decoders: 1, labelled with the engine's compute type in use (auto resolved).
  void engine_info(std::string_view compute_type);

 private:
  prometheus::Registry& registry_;
  prometheus::Labels labels_;  // stage, and model and version when set
  prometheus::Gauge* kv_used_ = nullptr;
  prometheus::Gauge* kv_free_ = nullptr;
  prometheus::Counter* requests_;
  std::vector<prometheus::Counter*> errors_;  // indexed by ErrorCode
  prometheus::Counter* malformed_;
  prometheus::Counter* late_;
  prometheus::Counter* duplicates_;
  prometheus::Counter* dead_;
  prometheus::Counter* redispatched_;
  prometheus::Counter* drained_;
  prometheus::Counter* heartbeats_missed_;
  prometheus::Counter* cancelled_;
  prometheus::Counter* expired_queued_;
  prometheus::Counter* expired_computing_;
  prometheus::Histogram* queue_;
  prometheus::Histogram* compute_;
  prometheus::Histogram* batch_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* queue_depth_;
};

// The gateway's own view: end-to-end latency by status, and its split as SageMaker reports it:
// model latency (encode + decode compute) and overhead latency (end to end minus model).
// With a repository, a request's latencies are labelled with its model version (model_labels);
// `model_key` "" (a pipeline's one model, or a request refused before its model resolved): none.
class GatewayMetrics {
 public:
  explicit GatewayMetrics(prometheus::Registry& registry);
  void request_seconds(bool ok, double seconds, const std::string& model_key = "");
  void latency_split(double model_seconds, double overhead_seconds,
                     const std::string& model_key = "");
  void late_result();
  void cache_lookup(bool hit);
  // A client's cancel: `found` when it named a request in flight (then answered `cancelled`),
  // else the request had been answered already (or never existed) and nothing happened.
  void cancel(bool found);

 private:
  struct Latencies {
    prometheus::Histogram* ok;
    prometheus::Histogram* error;
    prometheus::Histogram* model;
    prometheus::Histogram* overhead;
  };
  // A model version's histograms, made on its first request.
  const Latencies& latencies(const std::string& model_key);

  prometheus::Family<prometheus::Histogram>* requests_;
  prometheus::Family<prometheus::Histogram>* model_;
  prometheus::Family<prometheus::Histogram>* overhead_;
  std::map<std::string, Latencies, std::less<>> by_model_;
  prometheus::Counter* late_;
  prometheus::Counter* cache_hits_;
  prometheus::Counter* cache_misses_;
  prometheus::Counter* cancels_found_;
  prometheus::Counter* cancels_not_found_;
};

// Exceptions a gateway front door's handler threw and its boundary caught: each became an
// internal error for its one request, and the process kept serving. Labelled door="http" or
// "grpc"; thread-safe (the doors count on their own threads).
class FrontDoorMetrics {
 public:
  enum class Door { kHttp, kGrpc };
  explicit FrontDoorMetrics(prometheus::Registry& registry);
  void handler_exception(Door door);
  double handler_exceptions(Door door) const;  // for tests

 private:
  prometheus::Counter* http_;
  prometheus::Counter* grpc_;
};

// CurveZMQ connections a hub refused: a client key not in its allow list, or no CurveZMQ at all.
// Labelled hub="<name>"; thread-safe (counted on the ZAP handler's thread).
class SecurityMetrics {
 public:
  SecurityMetrics(prometheus::Registry& registry, std::string_view hub);
  void refused();

 private:
  prometheus::Counter* refused_;
};

}  // namespace seqpipe::metrics
