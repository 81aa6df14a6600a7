// The exporter serves real /metrics over HTTP with the stage families and build info.
#include "seqpipe/observability/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace seqpipe::metrics {
namespace {

std::string http_get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return {};
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)!::write(fd, request.data(), request.size());
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;)
    response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return response;
}

// Orchestrators' probes: /healthz answers while the process runs; /ready follows Readiness,
// with its reason while not ready; /metrics is still prometheus-cpp's.
TEST(Metrics, HealthAndReadinessAnswerOnTheMetricsPort) {
  Exporter exporter("worker", 0);
  const std::string alive = http_get(exporter.port(), "/healthz");
  EXPECT_EQ(alive.rfind("HTTP/1.1 200", 0), 0u) << alive;
  std::string ready = http_get(exporter.port(), "/ready");
  EXPECT_EQ(ready.rfind("HTTP/1.1 503", 0), 0u) << ready;
  EXPECT_NE(ready.find("starting"), std::string::npos) << ready;
  exporter.readiness().set(true);
  ready = http_get(exporter.port(), "/ready");
  EXPECT_EQ(ready.rfind("HTTP/1.1 200", 0), 0u) << ready;
  exporter.readiness().set(false, "draining");
  ready = http_get(exporter.port(), "/ready");
  EXPECT_EQ(ready.rfind("HTTP/1.1 503", 0), 0u) << ready;
  EXPECT_NE(ready.find("draining"), std::string::npos) << ready;
  EXPECT_NE(http_get(exporter.port(), "/metrics").find("seqpipe_build_info"), std::string::npos);
}

// Two exporters in one process (tests): each port answers its own readiness.
TEST(Metrics, EachExportersReadinessIsItsOwn) {
  Exporter a("a", 0), b("b", 0);
  a.readiness().set(true);
  EXPECT_EQ(http_get(a.port(), "/ready").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(http_get(b.port(), "/ready").rfind("HTTP/1.1 503", 0), 0u);
}

TEST(Metrics, StageQueueGaugesAreLabelledByWorkerStageAndModel) {
  Exporter exporter("batcher", 0);
  StageMetrics hub(exporter.registry(), "batcher");
  hub.queue_for("decoder").set(5, 0.25);
  hub.for_model("speller/2").queue_for("encoder").set(2, 0.5);
  const std::string body = http_get(exporter.port(), "/metrics");
  for (const char* sample :
       {"seqpipe_batcher_stage_queue_depth{stage=\"decoder\"} 5",
        "seqpipe_batcher_stage_queue_wait_seconds{stage=\"decoder\"} 0.25",
        "seqpipe_batcher_stage_queue_depth{model=\"speller\",stage=\"encoder\",version=\"2\"} 2"})
    EXPECT_NE(body.find(sample), std::string::npos) << sample << "\n" << body;
}

TEST(Metrics, KvSlotGaugesAppearOnFirstUse) {
  Exporter exporter("decoder", 0);
  StageMetrics stage(exporter.registry(), "decoder");
  EXPECT_EQ(http_get(exporter.port(), "/metrics").find("seqpipe_decoder_kv_slots"),
            std::string::npos);
  stage.set_kv_slots(3, 29);
  const std::string body = http_get(exporter.port(), "/metrics");
  EXPECT_NE(body.find("seqpipe_decoder_kv_slots{stage=\"decoder\",state=\"used\"} 3"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("seqpipe_decoder_kv_slots{stage=\"decoder\",state=\"free\"} 29"),
            std::string::npos);
}

// A replica of a repository's model version labels everything it counts with the version.
TEST(Metrics, AModelVersionsReplicaLabelsItsMetrics) {
  Exporter exporter("decoder", 0);
  StageMetrics stage(exporter.registry(), "decoder", model_labels("speller/2"));
  stage.request(3);
  stage.set_kv_slots(1, 7);
  stage.engine_info("int8");
  const std::string body = http_get(exporter.port(), "/metrics");
  for (const char* sample :
       {"seqpipe_stage_requests_total{model=\"speller\",stage=\"decoder\",version=\"2\"} 3",
        "seqpipe_decoder_kv_slots{model=\"speller\",stage=\"decoder\",state=\"free\","
        "version=\"2\"} 7",
        "seqpipe_engine_info{compute_type=\"int8\",model=\"speller\",stage=\"decoder\","
        "version=\"2\"} 1"})
    EXPECT_NE(body.find(sample), std::string::npos) << sample << "\n" << body;
  EXPECT_TRUE(model_labels("").empty());  // a pipeline's one model: no labels, as before
}

TEST(Metrics, LatencyBucketsAreConfigurable) {
  const std::vector<double> defaults = latency_buckets();
  ASSERT_EQ(defaults.front(), 0.0001);
  ASSERT_EQ(defaults.back(), 5.0);
  set_latency_buckets({2000, 50000});
  Exporter exporter("gateway", 0);
  StageMetrics stage(exporter.registry(), "gateway");
  stage.queue_time(0.01);
  const std::string body = http_get(exporter.port(), "/metrics");
  EXPECT_NE(body.find("seqpipe_stage_queue_seconds_bucket{stage=\"gateway\",le=\"0.002\"} 0"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("seqpipe_stage_queue_seconds_bucket{stage=\"gateway\",le=\"0.05\"} 1"),
            std::string::npos);
  EXPECT_EQ(body.find("seqpipe_stage_queue_seconds_bucket{stage=\"gateway\",le=\"0.0001\"}"),
            std::string::npos);
  std::vector<int> restore;
  for (double s : defaults) restore.push_back(static_cast<int>(s * 1e6 + 0.5));
  set_latency_buckets(restore);
  EXPECT_EQ(latency_buckets(), defaults);
}

TEST(Metrics, ExporterServesStageFamiliesOnAnEphemeralPort) {
  Exporter exporter("tokenizer", 0);
  ASSERT_GT(exporter.port(), 0);
  StageMetrics stage(exporter.registry(), "tokenizer");
  stage.request(3);
  stage.error(protocol::ErrorCode::kTooLong);
  stage.compute_time(0.002);
  stage.batch_size(8);
  stage.set_queue_depth(5);
  const std::string body = http_get(exporter.port(), "/metrics");
  EXPECT_NE(body.find("seqpipe_build_info{service=\"tokenizer\""), std::string::npos)
      << body.substr(0, 400);
  EXPECT_NE(body.find("seqpipe_stage_requests_total{stage=\"tokenizer\"} 3"), std::string::npos);
  EXPECT_NE(body.find("seqpipe_stage_errors_total{code=\"too_long\",stage=\"tokenizer\"} 1"),
            std::string::npos);
  EXPECT_NE(body.find("seqpipe_stage_compute_seconds_bucket{stage=\"tokenizer\",le=\"0.0025\"} 1"),
            std::string::npos);
  EXPECT_NE(body.find("seqpipe_stage_queue_depth{stage=\"tokenizer\"} 5"), std::string::npos);
}

}  // namespace
}  // namespace seqpipe::metrics

namespace seqpipe::metrics {
namespace {
// Replicas started with one config share metrics_port: each takes the first free port after it.
TEST(Metrics, ReplicaTakesTheNextFreePort) {
  Exporter first("encoder", 0);
  Exporter second("encoder", first.port(), kReplicaPortRange);
  EXPECT_GT(second.port(), first.port());
  EXPECT_LT(second.port(), first.port() + kReplicaPortRange);
  EXPECT_THROW(Exporter("encoder", first.port(), 1), std::runtime_error);
}
}  // namespace
}  // namespace seqpipe::metrics
