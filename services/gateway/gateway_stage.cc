#include "gateway/gateway_stage.h"

#include <spdlog/spdlog.h>

#include <functional>
#include <utility>

#include "gateway/http_repository.h"
#include "seqpipe/config/gateway_config.h"
#include "seqpipe/config/model_config.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/observability/status.h"
#include "seqpipe/runtime/model_control.h"
#include "seqpipe/runtime/worker.h"
#include "seqpipe/security/security.h"

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
std::unique_ptr<HttpFrontDoor> start_http(zmq::context_t& context, Submissions& submissions,
                                          const config::PipelineConfig& c,
                                          const security::HubSecurity& security,
                                          size_t max_body_bytes, const SharedCatalog& catalog,
                                          metrics::FrontDoorMetrics& door_metrics) {
  const config::GatewayConfig& gateway = config::gateway_of(c);
  const config::ModelConfig& model = config::model_of(c);
  const auto address = config::parse_http_address(gateway.http_endpoint);
  if (!address) return nullptr;
  HttpOptions options;
  options.host = address->host;
  options.port = address->port;
  options.model_name = catalog.get()->default_name();  // the model's, or the repository's default
  options.repository = !model.repository.empty();
  options.catalog = &catalog;
  // Only `seqpipe up` with a repository answers on the control socket.
  if (!model.repository.empty()) options.control_endpoint = config::control_endpoint(c);
  // Whoever reaches HTTP beyond loopback could load and unload models: only when asked for.
  options.repository_api = config::loopback_host(address->host) || gateway.repository_api_public;
  if (!gateway.repository_token_file.empty())
    options.repository_token = read_repository_token(gateway.repository_token_file);
  options.max_body_bytes = max_body_bytes;
  options.metrics = &door_metrics;
  options.default_timeout = std::chrono::milliseconds(gateway.default_timeout_ms);
  auto http = std::make_unique<HttpFrontDoor>(context, submissions, options,
                                              model_ready(context, c, security));
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
  const config::GatewayConfig& gateway = config::gateway_of(c);
  const auto address = config::parse_http_address(gateway.grpc_endpoint);
  if (!address) return nullptr;
  GrpcOptions options;
  options.host = address->host;
  options.port = address->port;
  options.max_message_bytes = max_message_bytes;
  options.default_timeout = std::chrono::milliseconds(gateway.default_timeout_ms);
  options.max_timeout = std::chrono::milliseconds(gateway.max_timeout_ms);
  options.metrics = &door_metrics;
  auto grpc = std::make_unique<GrpcFrontDoor>(options, catalog, model_ready(context, c, security));
  spdlog::info("gateway: KServe v2 gRPC on {}:{} (default model '{}')", options.host, grpc->port(),
               catalog.get()->default_name());
  return grpc;
}

// What the repository holds and the gateway serves, as it starts.
void log_repository(const config::ModelConfig& model) {
  const config::ModelRepository repo = config::scan_repository(model.repository);
  for (const auto& m : config::newest_versions(repo.models, model.repository_versions))
    spdlog::info("gateway: serving model {} from {}", config::model_key(m.name, m.version), m.dir);
  for (const auto& bad : repo.bad)
    spdlog::warn("gateway: model repository entry {} is not served: {}", bad.path, bad.reason);
}

// The clients' ROUTER. A frame up to 4x max_message_bytes is read and answered too_long; a larger
// one makes ZeroMQ drop the connection before buffering it, so no client can exhaust the
// gateway's memory.
transport::SocketOptions client_options(size_t max_frame_bytes, const hub::HubContext& hub) {
  transport::SocketOptions options = hub.bound_options();
  options.max_message_bytes = static_cast<int64_t>(max_frame_bytes);
  return options;
}

}  // namespace

GatewayStage::GatewayStage(const config::LoadedConfig& loaded, hub::HubContext& hub)
    : stage_metrics_(hub.metrics),
      gateway_metrics_(hub.exporter.registry()),
      door_metrics_(hub.exporter.registry()),
      metrics_port_(hub.exporter.port()),
      max_frame_bytes_(
          static_cast<size_t>(config::gateway_of(config::pipeline_of(loaded)).max_message_bytes) *
          4),
      clients_(hub.context, zmq::socket_type::router, client_options(max_frame_bytes_, hub)),
      tokenizers_(hub.context, zmq::socket_type::router, hub.bound_options()),
      results_(hub.context, zmq::socket_type::pull, hub.bound_options()),
      results_endpoint_(bind_sockets(config::gateway_of(config::pipeline_of(loaded)))),
      gateway_(config::pipeline_of(loaded), results_endpoint_, hub.metrics, gateway_metrics_,
               config::version_config_loader(loaded)),
      catalog_(gateway_.models(), gateway_.request_limits()) {
  const config::PipelineConfig& c = config::pipeline_of(loaded);
  if (!config::model_of(c).repository.empty()) log_repository(config::model_of(c));
  http_ = start_http(hub.context, submissions_, c, hub.security, max_frame_bytes_, catalog_,
                     door_metrics_);
  grpc_ = start_grpc(hub.context, c, hub.security, max_frame_bytes_, catalog_, door_metrics_);
}

std::string GatewayStage::bind_sockets(const config::GatewayConfig& gateway) {
  client_endpoint_ = clients_.bind(gateway.client_endpoint, "gateway.client_endpoint");
  tokenizers_.bind(gateway.tokenizer_endpoint, "gateway.tokenizer_endpoint");
  std::string results = results_.bind(gateway.results_endpoint, "gateway.results_endpoint");
  spdlog::info("gateway: clients on {}, tokenizers on {}, results on {}, metrics on :{}",
               client_endpoint_, gateway.tokenizer_endpoint, results, metrics_port_);
  return results;
}

void GatewayStage::watch(hub::HubSockets& sockets) {
  clients_input_ = sockets.input(clients_);
  doors_input_ = sockets.input(submissions_.wake_fd());
  if (grpc_) grpc_input_ = sockets.input(grpc_->wake_fd());
  sockets.workers(tokenizers_, "a tokenizer");  // link kTokenizerLink
  results_input_ = sockets.input(results_);
}

// A request's deadline.
std::optional<std::chrono::nanoseconds> GatewayStage::until_next_timer() const {
  if (auto d = gateway_.next_deadline()) return *d - SteadyClock::now();
  return std::nullopt;
}

void GatewayStage::on_readable(size_t input, const Now& now, Outbox& out) {
  if (input == clients_input_) {
    while (auto frames = clients_.try_recv()) gateway_.on_client(std::move(*frames), now, out);
  } else if (input == doors_input_) {
    for (Submission& s : submissions_.take()) gateway_.submit(std::move(s), now, out);
  } else if (input == grpc_input_) {
    // The requests and cancels the gRPC door took from gRPC's threads, typed.
    grpc_->serve([&](Submission&& s) { gateway_.submit(std::move(s), now, out); });
  } else if (input == results_input_) {
    // The postprocessors' results.
    while (auto frames = results_.try_recv()) {
      if (auto m = worker::decode_frames(*frames, 1, "the results socket", limits_, stage_metrics_))
        gateway_.on_results(std::move(*m), now, out);
    }
  }
}

void GatewayStage::on_worker(size_t /*link*/, const std::string& worker,
                             stage::StageMessage&& message, const Now& now) {
  gateway_.on_tokenizer(worker, message, now);
}

// The supervisor's catalog message: the versions to route to from now on, answered with the
// requests in flight per version (a message that is not one changes nothing: an empty answer).
std::optional<std::string> GatewayStage::on_catalog(std::string_view bytes) {
  const auto models = model_control::decode_catalog(bytes);
  if (!models) {
    spdlog::warn("gateway: a model catalog message that does not decode; ignored");
    return model_control::encode_in_flight({});
  }
  const auto in_flight = gateway_.set_models(*models);
  catalog_.set(gateway_.models(), gateway_.request_limits());
  return model_control::encode_in_flight(in_flight);
}

// The gateway's line of `seqpipe status`: the models it serves and where it listens, as bound.
std::string GatewayStage::about() const {
  std::string line = "models";
  for (const auto& m : catalog_.get()->models())
    line += " " + config::model_key(m.name, m.version) + " (" + m.dir + ")";
  line += "; clients " + client_endpoint_;
  line += "; HTTP " + (http_ ? ":" + std::to_string(http_->port()) : std::string("off"));
  line += "; gRPC " + (grpc_ ? ":" + std::to_string(grpc_->port()) : std::string("off"));
  return line + "; /metrics :" + std::to_string(metrics_port_);
}

void GatewayStage::tick(const Now& now, Outbox& out) {
  if (grpc_) grpc_->expire(now.steady);  // its calls left unanswered too long
  gateway_.tick(now, out);
  gateway_.expire(now, out);
}

void GatewayStage::unreachable(size_t /*link*/, const std::string& worker, const Now& now,
                               Outbox& out) {
  gateway_.tokenizer_dead(worker, now, out);
}

// The round's replies to the msgpack clients, over the ROUTER (the doors' went to their sinks).
void GatewayStage::send_own(Outbox& out) {
  for (auto& [envelope, payload] : out.replies) {
    envelope.push_back(std::move(payload));
    if (!clients_.send(envelope)) spdlog::info("gateway: a client left before its reply");
  }
}

void GatewayStage::stopped() {
  spdlog::info("gateway: stopping with {} requests in flight", gateway_.in_flight());
}

}  // namespace seqpipe::gateway
