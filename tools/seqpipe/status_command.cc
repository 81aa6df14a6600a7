#include "seqpipe/status_command.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "seqpipe/security/security.h"

namespace seqpipe::supervisor {
namespace {

using Clock = std::chrono::steady_clock;

// What the running pipeline says it serves: each hub's own line (the models, bound ports and
// compute types as the hubs run them); for a hub that did not answer, what the local config
// would start, said as such.
void print_pipeline_summary(const config::LoadedConfig& loaded,
                            const status::PipelineStatus& status) {
  bool all_answered = true;
  for (const auto& hub : status.hubs) {
    const bool answered = hub.stages && !hub.stages->empty();
    all_answered = all_answered && answered;
    if (answered && !hub.stages->front().about.empty())
      std::printf("%s %s: %s\n", hub.hub.c_str(), hub.hub == "gateway" ? "serves" : "runs",
                  hub.stages->front().about.c_str());
  }
  if (all_answered) return;
  const config::PipelineConfig& c = loaded.config;
  std::printf(
      "a hub did not answer; the local config says: model %s, compute type %s (config: %s%s%s)\n",
      c.model.dir.c_str(), c.model.compute_type.c_str(),
      loaded.path.empty() ? "built-in defaults" : loaded.path.c_str(),
      loaded.model_path.empty() ? "" : " over ", loaded.model_path.c_str());
  const auto http = config::parse_http_address(c.gateway.http_endpoint);
  const auto grpc = config::parse_http_address(c.gateway.grpc_endpoint);
  std::printf("clients: %s; HTTP: %s; gRPC: %s; /metrics: %s:%d (gateway), :%d (batcher)\n",
              config::client_endpoints(c).c_str(), http ? c.gateway.http_endpoint.c_str() : "off",
              grpc ? c.gateway.grpc_endpoint.c_str() : "off", c.metrics.address.c_str(),
              c.gateway.metrics_port, c.batcher.metrics_port);
}

std::string duration_text(int64_t seconds) {
  char text[32];
  if (seconds >= 3600) {
    std::snprintf(text, sizeof text, "%lldh%02lldm", static_cast<long long>(seconds / 3600),
                  static_cast<long long>(seconds / 60 % 60));
  } else {
    std::snprintf(text, sizeof text, "%lldm%02llds", static_cast<long long>(seconds / 60),
                  static_cast<long long>(seconds % 60));
  }
  return text;
}

// One line per hub that answered: how long it has run, its error rate (the gateway) and the
// replicas it lost (each is one restart under `seqpipe up` or systemd).
void print_hub_lines(const status::PipelineStatus& status) {
  for (const auto& hub : status.hubs) {
    if (!hub.stages || hub.stages->empty()) continue;
    const auto& own = hub.stages->front();
    std::string line = hub.hub + ": up " + duration_text(own.uptime_s);
    if (hub.hub == "gateway") {
      // The server's errors say how the pipeline is doing; the clients' (invalid_argument,
      // not_found, ...) how its clients are.
      const int64_t server = own.errors - own.client_errors;
      const double rate = own.requests == 0 ? 0.0 : 100.0 * server / own.requests;
      char text[128];
      std::snprintf(text, sizeof text,
                    "; %lld requests, %lld server errors (%.2f%%), %lld client errors",
                    static_cast<long long>(own.requests), static_cast<long long>(server), rate,
                    static_cast<long long>(own.client_errors));
      line += text;
    }
    line += "; replicas lost:";
    for (size_t i = 1; i < hub.stages->size(); ++i) {
      const auto& st = (*hub.stages)[i];
      line += (i == 1 ? " " : ", ") + st.stage + " " + std::to_string(st.lost);
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

status::PipelineStatus ask_until_ready(zmq::context_t& context, const config::PipelineConfig& c,
                                       int wait_s) {
  const auto until = Clock::now() + std::chrono::seconds(wait_s);
  for (;;) {
    auto status = status::ask_pipeline(context, c, std::chrono::milliseconds(1000),
                                       security::client_keys(c.security));
    if (status.ready() || Clock::now() >= until) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a person's wait, not a test's
  }
}

std::string missing_text(const status::PipelineStatus& status) {
  std::string why;
  for (const auto& m : status.missing) why += (why.empty() ? "" : ", ") + m;
  return why;
}

int status_command(const service::ServiceArgs& args, int wait_s) {
  const config::LoadedConfig loaded =
      config::load_pipeline_config(args.config_path, args.overrides);
  const config::PipelineConfig& c = loaded.config;
  zmq::context_t context(1);
  const auto status = ask_until_ready(context, c, wait_s);
  print_pipeline_summary(loaded, status);
  std::printf("%-14s %8s %10s %8s %13s\n", "stage", "replicas", "in_flight", "queued",
              "free_credits");
  for (const auto& hub : status.hubs) {
    if (!hub.stages) {
      std::printf("%-14s %s (no answer on %s)\n", hub.hub.c_str(), "down", hub.endpoint.c_str());
      continue;
    }
    for (const auto& st : *hub.stages) {
      // A hub grants credits and holds none: "-", not a 0 that reads as "no capacity".
      const std::string free =
          st.free_credits == status::kNoCredits ? "-" : std::to_string(st.free_credits);
      std::printf("%-14s %8d %10d %8d %13s\n", st.stage.c_str(), st.replicas, st.in_flight,
                  st.queued, free.c_str());
    }
  }
  print_hub_lines(status);
  std::printf("ready: %s\n",
              status.ready() ? "yes" : ("no: no live " + missing_text(status)).c_str());
  return status.ready() ? 0 : 1;
}
}  // namespace seqpipe::supervisor
