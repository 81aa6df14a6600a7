// seqpipe-gateway: the client-facing hub. Binds the client socket, the tokenizers' socket and
// the results socket; one loop polls all three.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>

#include "gateway/gateway.h"
#include "gateway/grpc_front_door.h"
#include "gateway/http_front_door.h"
#include "gateway/shared_catalog.h"
#include "gateway/submissions.h"
#include "seqpipe/config/config.h"
#include "seqpipe/observability/metrics.h"
#include "seqpipe/observability/status.h"
#include "seqpipe/runtime/hub.h"
#include "seqpipe/runtime/service.h"
#include "seqpipe/runtime/service_main.h"
#include "seqpipe/runtime/worker.h"
#include "seqpipe/security/security.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::gateway {
namespace {

// The front doors' readiness check: the whole pipeline (""), or one model version's replicas.
std::function<bool(const std::string&)> model_ready(zmq::context_t& context,
                                                    const config::PipelineConfig& c,
                                                    const security::HubSecurity& security) {
  return [&context, &c, &security](const std::string& model) {
    const auto st =
        status::ask_pipeline(context, c, std::chrono::milliseconds(500), security.client());
    return model.empty() ? st.ready() : st.ready_for(model);
  };
}

// The HTTP front door on gateway.http_endpoint (none when it is off).
std::unique_ptr<HttpFrontDoor> start_http(zmq::context_t& context, Submissions& gateway,
                                          const config::PipelineConfig& c,
                                          const security::HubSecurity& security,
                                          size_t max_body_bytes, const SharedCatalog& catalog,
                                          metrics::FrontDoorMetrics& door_metrics) {
  const auto address = config::parse_http_address(c.gateway.http_endpoint);
  if (!address) return nullptr;
  HttpOptions options;
  options.host = address->host;
  options.port = address->port;
  options.model_name = catalog.get()->default_name();  // the model's, or the repository's default
  options.repository = !c.model.repository.empty();
  options.catalog = &catalog;
  // Only `seqpipe up` with a repository answers on the control socket.
  if (!c.model.repository.empty()) options.control_endpoint = config::control_endpoint(c);
  // Whoever reaches HTTP beyond loopback could load and unload models: only when asked for.
  options.repository_api = config::loopback_host(address->host) || c.gateway.repository_api_public;
  if (!c.gateway.repository_token_file.empty())
    options.repository_token = read_repository_token(c.gateway.repository_token_file);
  options.max_body_bytes = max_body_bytes;
  options.metrics = &door_metrics;
  options.default_timeout = std::chrono::milliseconds(c.gateway.default_timeout_ms);
  auto http =
      std::make_unique<HttpFrontDoor>(context, gateway, options, model_ready(context, c, security));
  spdlog::info("gateway: HTTP on {}:{} (model '{}')", options.host, http->port(),
               options.model_name);
  return http;
}

// KServe v2 over gRPC on gateway.grpc_endpoint (none when it is off).
// Its requests and replies go by the gateway's loop (serve, answer), not over a socket.
std::unique_ptr<GrpcFrontDoor> start_grpc(zmq::context_t& context, const config::PipelineConfig& c,
                                          const security::HubSecurity& security,
                                          size_t max_message_bytes, const SharedCatalog& catalog,
                                          metrics::FrontDoorMetrics& door_metrics) {
  const auto address = config::parse_http_address(c.gateway.grpc_endpoint);
  if (!address) return nullptr;
  GrpcOptions options;
  options.host = address->host;
  options.port = address->port;
  options.max_message_bytes = max_message_bytes;
  options.default_timeout = std::chrono::milliseconds(c.gateway.default_timeout_ms);
  options.max_timeout = std::chrono::milliseconds(c.gateway.max_timeout_ms);
  options.metrics = &door_metrics;
  auto grpc = std::make_unique<GrpcFrontDoor>(options, catalog, model_ready(context, c, security));
  spdlog::info("gateway: KServe v2 gRPC on {}:{} (default model '{}')", options.host, grpc->port(),
               catalog.get()->default_name());
  return grpc;
}

// The supervisor's catalog message: the versions to route to from now on, answered with the
// requests in flight per version (a message that is not one changes nothing: an empty answer).
std::string apply_catalog(std::string_view bytes, Gateway& gateway, SharedCatalog& shared) {
  const auto models = model_control::decode_catalog(bytes);
  if (!models) {
    spdlog::warn("gateway: a model catalog message that does not decode; ignored");
    return model_control::encode_in_flight({});
  }
  const auto in_flight = gateway.set_models(*models);
  shared.set(gateway.models(), gateway.request_limits());
  return model_control::encode_in_flight(in_flight);
}

// A round of the gRPC door: the requests and cancels it took from gRPC's threads (when its
// eventfd woke the loop) into the gateway, typed; its calls left unanswered too long.
void serve_grpc(GrpcFrontDoor& grpc, bool woken, Gateway& gateway, const Now& now, Outbox& out) {
  if (woken) grpc.serve([&](Submission&& s) { gateway.submit(std::move(s), now, out); });
  grpc.expire(now.steady);
}

// The round's replies to the msgpack clients, over the ROUTER (the doors' went to their sinks).
void send_replies(Outbox& out, transport::Socket& clients) {
  for (auto& [envelope, payload] : out.replies) {
    envelope.push_back(std::move(payload));
    if (!clients.send(envelope)) spdlog::info("gateway: a client left before its reply");
  }
}

// What the repository holds and the gateway serves, as it starts.
void log_repository(const config::ModelConfig& model) {
  const config::ModelRepository repo = config::scan_repository(model.repository);
  for (const auto& m : config::newest_versions(repo.models, model.repository_versions))
    spdlog::info("gateway: serving model {} from {}", config::model_key(m.name, m.version), m.dir);
  for (const auto& bad : repo.bad)
    spdlog::warn("gateway: model repository entry {} is not served: {}", bad.path, bad.reason);
}

// The gateway's line of `seqpipe status`: the models it serves and where it listens, as bound.
std::string about_line(const config::ModelCatalog& catalog, const std::string& clients,
                       const HttpFrontDoor* http, const GrpcFrontDoor* grpc, int metrics_port) {
  std::string line = "models";
  for (const auto& m : catalog.models())
    line += " " + config::model_key(m.name, m.version) + " (" + m.dir + ")";
  line += "; clients " + clients;
  line += "; HTTP " + (http ? ":" + std::to_string(http->port()) : std::string("off"));
  line += "; gRPC " + (grpc ? ":" + std::to_string(grpc->port()) : std::string("off"));
  return line + "; /metrics :" + std::to_string(metrics_port);
}

// How long a round may wait: a heartbeat interval (at most 100 ms), less when a request's
// deadline comes first.
std::chrono::milliseconds poll_timeout(Gateway& gateway, int heartbeat_interval_ms) {
  auto timeout =
      std::min(std::chrono::milliseconds(100), std::chrono::milliseconds(heartbeat_interval_ms));
  if (auto d = gateway.next_deadline()) {
    timeout = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(*d - SteadyClock::now()),
                         std::chrono::milliseconds(0), timeout);
  }
  return timeout;
}

// The postprocessors' results waiting on `results`, to the gateway.
void read_results(transport::Socket& results, const stage::Limits& limits,
                  metrics::StageMetrics& stage_metrics, Gateway& gateway, const Now& now,
                  Outbox& out) {
  while (auto frames = results.try_recv()) {
    if (auto m = worker::decode_frames(*frames, 1, "the results socket", limits, stage_metrics))
      gateway.on_results(std::move(*m), now, out);
  }
}

int serve(const config::LoadedConfig& loaded) {
  const config::PipelineConfig& c = loaded.config;
  service::init_logging("gateway");
  service::install_stop_handlers();
  const auto started = std::chrono::steady_clock::now();  // for the status probe's uptime
  metrics::Exporter exporter("gateway", c.gateway.metrics_port, 1, c.metrics.address);
  metrics::StageMetrics stage_metrics(exporter.registry(), "gateway");
  metrics::GatewayMetrics gateway_metrics(exporter.registry());
  metrics::FrontDoorMetrics door_metrics(exporter.registry());
  if (!c.model.repository.empty()) log_repository(c.model);

  zmq::context_t context(1);
  const security::HubSecurity security(context, c.security, "gateway", exporter.registry());
  // A frame up to 4x max_message_bytes is read and answered too_long; a larger one makes ZeroMQ
  // drop the connection before buffering it, so no client can exhaust the gateway's memory.
  transport::SocketOptions client_options;
  client_options.max_message_bytes = static_cast<int64_t>(c.gateway.max_message_bytes) * 4;
  client_options.curve = security.server();
  transport::Socket clients(context, zmq::socket_type::router, client_options);
  transport::SocketOptions worker_options;
  worker_options.curve = security.server();
  transport::Socket tokenizers(context, zmq::socket_type::router, worker_options);
  transport::Socket results(context, zmq::socket_type::pull, worker_options);
  const std::string client_endpoint =
      clients.bind(c.gateway.client_endpoint, "gateway.client_endpoint");
  tokenizers.bind(c.gateway.tokenizer_endpoint, "gateway.tokenizer_endpoint");
  const std::string results_endpoint =
      results.bind(c.gateway.results_endpoint, "gateway.results_endpoint");
  spdlog::info("gateway: clients on {}, tokenizers on {}, results on {}, metrics on :{}",
               client_endpoint, c.gateway.tokenizer_endpoint, results_endpoint, exporter.port());
  // Each model version's requests get its own per-model settings, from its config loaded as its
  // replicas load theirs.
  Gateway gateway(c, results_endpoint, stage_metrics, gateway_metrics,
                  [&loaded](const config::ModelVersion& m) {
                    return config::load_model_version_config(loaded, m);
                  });
  SharedCatalog catalog(gateway.models(), gateway.request_limits());
  Submissions submissions;  // the HTTP door's requests, to the loop
  const std::unique_ptr<HttpFrontDoor> http =
      start_http(context, submissions, c, security,
                 static_cast<size_t>(client_options.max_message_bytes), catalog, door_metrics);
  const std::unique_ptr<GrpcFrontDoor> grpc =
      start_grpc(context, c, security, static_cast<size_t>(client_options.max_message_bytes),
                 catalog, door_metrics);
  exporter.readiness().set(true);  // bound: never waits for workers (docs/DEPLOY.md, Probes)

  // Cancels (and heartbeats, with several batchers) go to the batchers' ingress (where the
  // tokenizers send sequences), over PUSH.
  transport::SocketOptions batcher_options;
  batcher_options.curve = security.client();
  transport::PushSockets batchers(context, batcher_options);
  transport::Poller poller;
  const size_t kClients = poller.add(clients), kTokenizers = poller.add(tokenizers),
               kResults = poller.add(results);
  const size_t kGrpc = grpc ? poller.add(grpc->wake_fd()) : 0;
  const size_t kDoors = poller.add(submissions.wake_fd());
  const auto about = [&] {
    return about_line(*catalog.get(), client_endpoint, http.get(), grpc.get(), exporter.port());
  };
  const std::vector<transport::Socket*> worker_sockets{&tokenizers};  // by link: kTokenizerLink
  const stage::Limits limits;
  Outbox out;
  while (!service::stop_requested()) {
    poller.poll(poll_timeout(gateway, c.liveness.heartbeat_interval_ms));
    const Now now = Now::read();  // the one reading of the clocks per round
    if (poller.readable(kClients)) {
      while (auto frames = clients.try_recv()) gateway.on_client(std::move(*frames), now, out);
    }
    if (poller.readable(kDoors)) {
      for (Submission& s : submissions.take()) gateway.submit(std::move(s), now, out);
    }
    if (grpc) serve_grpc(*grpc, poller.readable(kGrpc), gateway, now, out);
    if (poller.readable(kTokenizers)) {
      hub::read_workers(
          tokenizers, "a tokenizer", limits, stage_metrics,
          [&] { return status::with_uptime(gateway.status(), started, about()); },
          [&](const std::string& worker, stage::StageMessage&& m) {
            gateway.on_tokenizer(worker, m, now);
          },
          [&](std::string_view bytes) { return apply_catalog(bytes, gateway, catalog); });
    }
    if (poller.readable(kResults)) read_results(results, limits, stage_metrics, gateway, now, out);
    gateway.tick(now, out);
    gateway.expire(now, out);
    hub::send_rounds(
        out, worker_sockets, batchers, "gateway", [&](Outbox& o) { gateway.dispatch(now, o); },
        [&](size_t, const std::string& worker, Outbox& o) {
          gateway.tokenizer_dead(worker, now, o);
        });
    send_replies(out, clients);
    out.clear();
  }
  spdlog::info("gateway: stopping with {} requests in flight", gateway.in_flight());
  return 0;
}

}  // namespace
}  // namespace seqpipe::gateway

int main(int argc, char** argv) {
  return seqpipe::service::run_service_main_layers(
      argc, argv, "gateway",
      "Serves clients: validates requests, keeps deadlines, answers each once.",
      seqpipe::gateway::serve);
}
