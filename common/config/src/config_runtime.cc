// Where a config meets the machine: the runtime directory (from the environment, read only in
// load_pipeline_config), the endpoints made concrete in it, and the auto replicas and threads
// sized from the cores.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "config_check.h"
#include "config_schema.h"
#include "seqpipe/config/config.h"
#include "seqpipe/generation/model_files.h"

namespace seqpipe::config {
namespace {

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

}  // namespace

std::string choose_runtime_dir(const std::string& configured, const char* xdg_runtime_dir,
                               unsigned uid) {
  if (!configured.empty()) return configured;
  // The XDG spec says to ignore a relative XDG_RUNTIME_DIR.
  if (xdg_runtime_dir != nullptr && xdg_runtime_dir[0] == '/')
    return std::string(xdg_runtime_dir) + "/seqpipe";
  return "/tmp/seqpipe-" + std::to_string(uid);
}

PipelineConfig resolve_endpoints(PipelineConfig config, const std::string& runtime_dir) {
  if (runtime_dir.empty() || runtime_dir.front() != '/') {
    fail("", "runtime_dir must be an absolute path, got '" + runtime_dir + "'");
  }
  std::string dir = runtime_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  config.runtime_dir = dir;
  for_each_field(config, [&](Key key, auto& member, const auto& rule) {
    if constexpr (std::is_same_v<std::decay_t<decltype(rule)>, EndpointListRule>) {
      for (std::string& endpoint : member) endpoint = replace_all(endpoint, "{runtime_dir}", dir);
    }
    if constexpr (std::is_same_v<std::decay_t<decltype(rule)>, TextRule>) {
      if (rule.kind != TextKind::kEndpoint) return;
      member = replace_all(effective_endpoint(member, rule), "{runtime_dir}", dir);
      if (member.starts_with("ipc://") && member.size() - 6 > kMaxIpcPath) {
        fail("", key.path() + ": the ipc path of '" + member + "' is " +
                     std::to_string(member.size() - 6) +
                     " bytes; a Unix socket path holds at most " + std::to_string(kMaxIpcPath) +
                     " (choose a shorter runtime_dir)");
      }
    }
  });
  check_distinct_endpoints(config, Origins(""));
  // Several hub replicas: the workers serve them all and the gateways submit to every batcher,
  // unless the lists were given.
  auto replicas_of = [](const std::string& endpoint, int n) {
    std::vector<std::string> all;
    for (int k = 0; k < n; ++k) all.push_back(replica_endpoint(endpoint, k));
    return all;
  };
  if (config.gateway.replicas > 1 && config.tokenizer.hub_endpoints.empty())
    config.tokenizer.hub_endpoints =
        replicas_of(config.gateway.tokenizer_endpoint, config.gateway.replicas);
  const int batchers = config.batcher.replicas;
  if (batchers > 1) {
    const BatcherConfig& b = config.batcher;
    if (config.gateway.batcher_endpoints.empty())
      config.gateway.batcher_endpoints = replicas_of(b.ingress_endpoint, batchers);
    if (config.encoder.hub_endpoints.empty())
      config.encoder.hub_endpoints = replicas_of(b.encoder_endpoint, batchers);
    if (config.decoder.hub_endpoints.empty())
      config.decoder.hub_endpoints = replicas_of(b.decoder_endpoint, batchers);
    if (config.postprocessor.hub_endpoints.empty())
      config.postprocessor.hub_endpoints = replicas_of(b.postprocessor_endpoint, batchers);
  }
  return config;
}

std::string replica_endpoint(const std::string& endpoint, int k) {
  if (k == 0) return endpoint;
  if (endpoint.starts_with("tcp://")) {
    const size_t colon = endpoint.rfind(':');
    int port = 0;
    const std::string_view text = std::string_view(endpoint).substr(colon + 1);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
    if (ec != std::errc() || end != text.data() + text.size() || port == 0)
      return endpoint;  // no fixed port (refused with replicas by the config checks)
    return endpoint.substr(0, colon + 1) + std::to_string(port + k);
  }
  const size_t slash = endpoint.rfind('/');
  const size_t dot = endpoint.rfind('.');
  const size_t at = dot != std::string::npos && dot > slash ? dot : endpoint.size();
  std::string replica = endpoint.substr(0, at);
  replica += '-';
  replica += std::to_string(k + 1);
  replica += endpoint.substr(at);
  return replica;
}

namespace {

std::string moved_port(int port, int k) {
  return std::to_string(port == 0 ? 0 : port + k);
}

}  // namespace

std::vector<std::string> gateway_replica_overrides(const PipelineConfig& c, int k) {
  if (k == 0) return {};
  const GatewayConfig& g = c.gateway;
  std::vector<std::string> sets = {
      "gateway.client_endpoint=" + replica_endpoint(g.client_endpoint, k),
      "gateway.tokenizer_endpoint=" + replica_endpoint(g.tokenizer_endpoint, k),
      "gateway.results_endpoint=" + replica_endpoint(g.results_endpoint, k),
      "gateway.metrics_port=" + moved_port(g.metrics_port, k)};
  for (const auto& [key, endpoint] : {std::pair{"gateway.http_endpoint=", &g.http_endpoint},
                                      std::pair{"gateway.grpc_endpoint=", &g.grpc_endpoint}}) {
    if (const auto address = parse_http_address(*endpoint)) {
      std::string set = key;
      set += address->host;
      set += ':';
      set += moved_port(address->port, k);
      sets.push_back(std::move(set));
    }
  }
  return sets;
}

std::vector<std::string> batcher_replica_overrides(const PipelineConfig& c, int k) {
  if (k == 0) return {};
  const BatcherConfig& b = c.batcher;
  return {"batcher.ingress_endpoint=" + replica_endpoint(b.ingress_endpoint, k),
          "batcher.encoder_endpoint=" + replica_endpoint(b.encoder_endpoint, k),
          "batcher.decoder_endpoint=" + replica_endpoint(b.decoder_endpoint, k),
          "batcher.postprocessor_endpoint=" + replica_endpoint(b.postprocessor_endpoint, k),
          "batcher.metrics_port=" + moved_port(b.metrics_port, k)};
}

std::string client_endpoints(const PipelineConfig& c) {
  std::string all;
  for (int k = 0; k < c.gateway.replicas; ++k) {
    if (k > 0) all += ',';
    all += replica_endpoint(c.gateway.client_endpoint, k);
  }
  return all;
}

std::string control_endpoint(const PipelineConfig& c) {
  return "ipc://" + c.runtime_dir + "/control.sock";
}

Sizing size_for_cores(int cores, int64_t step_params) {
  cores = std::max(1, cores);
  Sizing s;
  if (step_params > 0 && step_params < kThreadedStepParams) {
    s.encoder_replicas = s.decoder_replicas = std::min(cores, 64);
    s.tokenizer_replicas = s.postprocessor_replicas = 1 + (cores - 1) / 4;
    return s;  // one thread each
  }
  s.decoder_replicas = 1 + (cores - 1) / 8;
  s.decoder_threads = std::max(1, cores / s.decoder_replicas);
  s.encoder_replicas = 1 + (cores - 1) / 16;
  s.encoder_threads = std::max(1, cores / s.encoder_replicas);
  s.tokenizer_replicas = 1 + (cores - 1) / 4;
  s.postprocessor_replicas = s.tokenizer_replicas;
  return s;
}

int64_t decoder_step_params(const std::string& model_dir) {
  try {
    // Read capped and parsed as JSON (a YAML parser took seconds over a 1 MB file).
    const auto json = nlohmann::json::parse(
        read_model_file((std::filesystem::path(model_dir) / "config.json").string(),
                        generation::kMaxModelConfigBytes));
    const int64_t d = json.at("d_model").get<int64_t>(), f = json.at("d_ff").get<int64_t>();
    const int64_t layers =
        json.contains("num_decoder_layers") && !json["num_decoder_layers"].is_null()
            ? json["num_decoder_layers"].get<int64_t>()
            : json.at("num_layers").get<int64_t>();
    const int64_t vocab = json.at("vocab_size").get<int64_t>();
    // Sizes beyond any model (or negative) are not a T5 config: the engine says why.
    constexpr int64_t kLimit = int64_t{1} << 20;
    if (d <= 0 || f <= 0 || layers <= 0 || vocab <= 0 || d > kLimit || f > kLimit ||
        layers > 1024 || vocab > kLimit * 16)
      return 0;
    return layers * (6 * d * d + 2 * d * f) + vocab * d;
  } catch (const std::exception&) {  // missing, unreadable, too large or not a T5 config
    return 0;
  }
}

void apply_sizing(PipelineConfig& c, int cores, int64_t step_params) {
  const Sizing s = size_for_cores(cores, step_params);
  auto fill = [](int& value, int sized) {
    if (value == kAuto) value = sized;
  };
  fill(c.tokenizer.replicas, s.tokenizer_replicas);
  fill(c.encoder.replicas, s.encoder_replicas);
  fill(c.decoder.replicas, s.decoder_replicas);
  fill(c.postprocessor.replicas, s.postprocessor_replicas);
  // Each replica its share of the cores, for replicas sized or set.
  fill(c.encoder.threads, std::max(1, std::max(1, cores) / c.encoder.replicas));
  fill(c.decoder.threads, std::max(1, std::max(1, cores) / c.decoder.replicas));
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
}

bool engine_threads_oversubscribe(const PipelineConfig& c, int cores) {
  // threads 0 (auto) left unresolved would mean all cores each.
  auto threads = [cores](int t) { return t == kAuto ? cores : t; };
  return c.encoder.replicas * threads(c.encoder.threads) +
             c.decoder.replicas * threads(c.decoder.threads) >
         cores;
}

bool openmp_wait_chosen() {
  return std::any_of(std::begin(kOpenMpWaitVariables), std::end(kOpenMpWaitVariables),
                     [](const char* name) { return std::getenv(name) != nullptr; });
}

LoadedConfig load_pipeline_config(const std::string& config_path,
                                  const std::vector<std::string>& overrides) {
  std::string path = config_path;
  std::error_code ec;
  if (path.empty() && std::filesystem::exists(kDefaultConfigPath, ec)) {
    path = kDefaultConfigPath;
  }
  LoadedConfig loaded = load_layers(path, overrides);
  // The only place the environment is read: everything below gets the resolved config.
  const std::string runtime_dir =
      choose_runtime_dir(loaded.config.runtime_dir, std::getenv("XDG_RUNTIME_DIR"), ::getuid());
  apply_sizing(loaded.config, available_cores(), decoder_step_params(loaded.config.model.dir));
  validate(loaded.config);  // again: the sized replicas move the metrics ports' ranges
  loaded.config = resolve_endpoints(std::move(loaded.config), runtime_dir);
  return loaded;
}

}  // namespace seqpipe::config
