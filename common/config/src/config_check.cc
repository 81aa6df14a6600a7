#include "config_check.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <system_error>
#include <tuple>
#include <type_traits>

#include "seqpipe/config/edit_distance.h"
#include "seqpipe/config/model_repository.h"

namespace seqpipe::config {

std::optional<HttpAddress> parse_http_address(std::string_view endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  HttpAddress address{std::string(endpoint.substr(0, colon)), -1};
  const std::string_view port = endpoint.substr(colon + 1);
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), address.port);
  in_addr parsed{};
  if (::inet_pton(AF_INET, address.host.c_str(), &parsed) != 1 || ec != std::errc() ||
      end != port.data() + port.size() || port.empty() || address.port < 0 || address.port > 65535)
    return std::nullopt;
  return address;
}

namespace {

void check_endpoint(const std::string& where, const std::string& path,
                    const std::string& endpoint) {
  if (endpoint.empty()) return;  // the default ipc endpoint
  std::string_view rest;
  std::string_view scheme;
  for (std::string_view s : {"tcp://", "ipc://", "inproc://"}) {
    if (endpoint.starts_with(s)) {
      scheme = s;
      rest = std::string_view(endpoint).substr(s.size());
    }
  }
  if (scheme.empty()) {
    fail(where, path + " must start with tcp://, ipc:// or inproc://, got '" + endpoint + "'");
  }
  if (rest.empty()) fail(where, path + " has nothing after " + std::string(scheme));
  for (size_t open = rest.find('{'); open != std::string_view::npos;
       open = rest.find('{', open + 1)) {
    if (!rest.substr(open).starts_with("{runtime_dir}")) {
      fail(where,
           path + ": unknown placeholder in '" + endpoint + "' (only {runtime_dir} is replaced)");
    }
  }
  if (scheme == "tcp://") {
    const size_t colon = rest.rfind(':');
    const std::string_view port =
        colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    const std::optional<int64_t> number = parse_integer(port);
    if (colon == 0 || (port != "*" && (!number || *number < 1 || *number > kMaxPort))) {
      fail(where,
           path + " must be tcp://HOST:PORT with PORT in [1, 65535] or *, got '" + endpoint + "'");
    }
  }
}

// Fixed metrics ports of different processes must not collide; a worker's replicas use
// metrics_port .. metrics_port + replicas - 1.
void check_metrics_ports(const PipelineConfig& c, const Origins& origins) {
  struct PortRange {
    std::string key;
    int first;
    int last;
  };
  std::vector<PortRange> ranges;
  auto add = [&](const std::string& section, int port, int replicas) {
    if (port == 0) return;  // any free port
    const std::string key = section + ".metrics_port";
    const int64_t last = int64_t{port} + replicas - 1;
    if (last > kMaxPort) {
      fail(origins.of(key), key + " + " + section +
                                ".replicas - 1 must be <= 65535 (replica i listens on " + key +
                                " + i), got " + std::to_string(last));
    }
    for (const PortRange& r : ranges) {
      if (port <= r.last && r.first <= last) {
        fail(origins.of(key), key + " " + std::to_string(port) +
                                  (last > port ? ".." + std::to_string(last) : "") + " overlaps " +
                                  r.key + " " + std::to_string(r.first) +
                                  (r.last > r.first ? ".." + std::to_string(r.last) : ""));
      }
    }
    ranges.push_back({key, port, static_cast<int>(last)});
  };
  add("gateway", c.gateway.metrics_port, c.gateway.replicas);
  add("tokenizer", c.tokenizer.metrics_port, c.tokenizer.replicas);
  add("batcher", c.batcher.metrics_port, c.batcher.replicas);
  add("encoder", c.encoder.metrics_port, c.encoder.replicas);
  add("decoder", c.decoder.metrics_port, c.decoder.replicas);
  add("postprocessor", c.postprocessor.metrics_port, c.postprocessor.replicas);
}

// Keys go together, and nothing leaves this machine in the clear unless the config says so.
void check_security(const PipelineConfig& c, const Origins& origins) {
  const SecurityConfig& s = c.security;
  // Everyone connects to a hub; only the hubs read allowed_clients (HubSecurity requires it).
  if (!s.server_key.empty() && s.client_key.empty())
    fail(origins.of("security.server_key"),
         "security.client_key must be set with security.server_key (docs/DEPLOY.md, Keys)");
  if (s.server_key.empty()) {
    for (const auto& [key, value] : {std::pair{"security.client_key", s.client_key},
                                     std::pair{"security.allowed_clients", s.allowed_clients}}) {
      if (!value.empty())
        fail(origins.of(key),
             std::string(key) + " has no effect without security.server_key (the hubs' key)");
    }
  }
  if (s.allow_plaintext) return;
  const std::string how =
      "; give the hubs keys (security.server_key, docs/DEPLOY.md) or set "
      "security.allow_plaintext: true";
  if (s.server_key.empty()) {
    for_each_field(c, [&](Key key, const auto& member, const auto& rule) {
      if constexpr (std::is_same_v<std::decay_t<decltype(rule)>, TextRule>) {
        if (rule.kind == TextKind::kEndpoint && beyond_loopback(member)) {
          fail(origins.of(key.path()), key.path() + " binds '" + member +
                                           "' beyond loopback in plain text: anyone who can "
                                           "reach it could submit work or join as a worker" +
                                           how);
        }
      }
    });
  }
  // HTTP and gRPC are served without TLS: beyond loopback only when plain text is allowed.
  for (const auto& [key, endpoint, what] :
       {std::tuple{"gateway.http_endpoint", &c.gateway.http_endpoint, "HTTP"},
        std::tuple{"gateway.grpc_endpoint", &c.gateway.grpc_endpoint, "gRPC"}}) {
    const auto address = parse_http_address(*endpoint);
    if (address && !loopback_host(address->host)) {
      fail(origins.of(key), std::string(key) + " '" + *endpoint + "' serves " + what +
                                " beyond loopback: " + what +
                                " has no keys (only the ZeroMQ sockets are CurveZMQ); set "
                                "security.allow_plaintext: true to serve it in the clear");
    }
  }
}

}  // namespace

bool loopback_host(std::string_view host) {
  if (host == "localhost" || host == "lo" || host == "[::1]" || host == "::1") return true;
  // An IPv4 literal only: "127.example.com" is a name that may resolve anywhere.
  in_addr address{};
  return inet_pton(AF_INET, std::string(host).c_str(), &address) == 1 &&
         (ntohl(address.s_addr) >> 24) == 127;
}

bool beyond_loopback(std::string_view endpoint) {
  constexpr std::string_view kTcp = "tcp://";
  if (!endpoint.starts_with(kTcp)) return false;  // ipc:// and inproc:// stay on this machine
  std::string_view address = endpoint.substr(kTcp.size());
  // "source;address": ZeroMQ binds (and connects to) what follows the last ';'.
  if (const size_t semicolon = address.rfind(';'); semicolon != std::string_view::npos)
    address = address.substr(semicolon + 1);
  return !loopback_host(address.substr(0, address.rfind(':')));
}

[[noreturn]] void fail(const std::string& where, const std::string& message) {
  throw ConfigError(where.empty() ? message : where + ": " + message);
}

std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates) {
  const std::string* best = nullptr;
  size_t best_distance = 0;
  for (const std::string& candidate : candidates) {
    const size_t d = edit_distance(name, candidate);
    if (best == nullptr || d < best_distance) {
      best = &candidate;
      best_distance = d;
    }
  }
  if (best == nullptr || best_distance > std::max<size_t>(2, name.size() / 3)) return "";
  return " (did you mean " + *best + "?)";
}

std::string range_text(const IntRule& rule) {
  return "[" + std::to_string(rule.min) + ", " + std::to_string(rule.max) + "]";
}

std::optional<int64_t> parse_integer(std::string_view text) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

void check_list_endpoint(const std::string& where, const std::string& path,
                         const std::string& endpoint) {
  if (endpoint.empty()) fail(where, path + " must not be empty");
  check_endpoint(where, path, endpoint);
}

void check_text(const std::string& where, const Key& key, const std::string& value,
                const TextRule& rule) {
  switch (rule.kind) {
    case TextKind::kPath:
      if (value.empty()) fail(where, key.path() + " must not be empty");
      break;
    case TextKind::kOptionalPath:  // empty (off) or any path: the service reads it
      break;
    case TextKind::kPathList:  // empty (off) or paths separated by ':', as $PATH
      if (!value.empty() &&
          (value.front() == ':' || value.back() == ':' || value.find("::") != std::string::npos))
        fail(where, key.path() + " must be empty or paths separated by ':' (no empty path), got '" +
                        value + "'");
      break;
    case TextKind::kRuntimeDir:
      if (!value.empty() && value.front() != '/') {
        fail(where, key.path() + " must be an absolute path (or empty for the default), got '" +
                        value + "'");
      }
      break;
    case TextKind::kEndpoint:
      check_endpoint(where, key.path(), value);
      break;
    case TextKind::kIpv4: {
      in_addr parsed{};
      if (::inet_pton(AF_INET, value.c_str(), &parsed) != 1) {
        fail(where, key.path() + " must be an IPv4 address such as 127.0.0.1 or 0.0.0.0, got '" +
                        value + "'");
      }
      break;
    }
    case TextKind::kName:  // a name the engine checks when it loads (empty: the default)
      if (value.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
        fail(where, key.path() +
                        " must be a name such as int8 (lower-case letters, digits, _), got '" +
                        value + "'");
      break;
    case TextKind::kModelName:
      if (!value.empty() && !valid_model_name(value))
        fail(where, key.path() + " must be a model name (1 to " +
                        std::to_string(protocol::kMaxModelNameBytes) +
                        " of A-Z a-z 0-9 _ . -, not starting with '.'), got '" + value + "'");
      break;
    case TextKind::kDevice:
      if (value.empty() ||
          value.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789:") != std::string::npos)
        fail(where, key.path() + " must be cpu, cuda or cuda:N, got '" + value + "'");
      break;
    case TextKind::kHttpAddress:  // empty (off) or IPV4:PORT
      if (!value.empty() && !parse_http_address(value)) {
        fail(where, key.path() +
                        " must be empty (off) or IPV4:PORT such as 127.0.0.1:8000 (port 0: any "
                        "free port), got '" +
                        value + "'");
      }
      break;
  }
}

std::string effective_endpoint(const std::string& endpoint, const TextRule& rule) {
  return endpoint.empty() ? "ipc://{runtime_dir}/" + std::string(rule.default_socket) : endpoint;
}

// Two stages binding one address would fail at bind time with "address in use", far from the
// config line that caused it.
void check_distinct_endpoints(const PipelineConfig& c, const Origins& origins) {
  std::map<std::string, std::string> key_of_endpoint;
  for_each_field(c, [&](Key key, const auto& member, const auto& rule) {
    if constexpr (std::is_same_v<std::decay_t<decltype(rule)>, TextRule>) {
      if (rule.kind != TextKind::kEndpoint) return;
      const std::string endpoint = effective_endpoint(member, rule);
      const auto [other, inserted] = key_of_endpoint.emplace(endpoint, key.path());
      if (!inserted) {
        fail(origins.of(key.path()),
             key.path() + " and " + other->second + " are the same endpoint '" + endpoint + "'");
      }
    }
  });
}

namespace {

// Every field on its own, by its rule.
void check_each_field(const PipelineConfig& c, const Origins& origins) {
  // Every field on its own (already checked while parsing; again here for configs built in code).
  for_each_field(c, [&](Key key, const auto& member, const auto& rule) {
    using Member = std::decay_t<decltype(member)>;
    const std::string where = origins.of(key.path());
    if constexpr (std::is_same_v<Member, std::string>) {
      check_text(where, key, member, rule);
    } else if constexpr (std::is_same_v<Member, std::vector<std::string>>) {
      for (size_t i = 0; i < member.size(); ++i) {
        check_list_endpoint(where, key.path() + "[" + std::to_string(i) + "]", member[i]);
      }
    } else if constexpr (std::is_same_v<Member, std::vector<int>>) {
      for (size_t i = 0; i < member.size(); ++i) {
        check_int(where, key.path() + "[" + std::to_string(i) + "]", member[i], rule);
      }
    } else if constexpr (std::is_same_v<Member, bool>) {
      // any value is one
    } else {
      check_int(where, key.path(), member, rule);
    }
  });
}

// A check across fields: fails naming `key`, the key most likely at fault, first.
void require(const Origins& origins, bool ok, const std::string& key, const std::string& message) {
  if (!ok) fail(origins.of(key), key + " " + message);
}

// The gateway's, the metrics' and the batcher's limits against each other.
void check_limits(const PipelineConfig& c, const Origins& origins) {
  auto require = [&](bool ok, const std::string& key, const std::string& message) {
    config::require(origins, ok, key, message);
  };
  const GatewayConfig& g = c.gateway;
  require(g.default_timeout_ms <= g.max_timeout_ms, "gateway.default_timeout_ms",
          "must be <= gateway.max_timeout_ms (" + std::to_string(g.max_timeout_ms) + "), got " +
              std::to_string(g.default_timeout_ms));
  require(g.max_text_bytes <= g.max_message_bytes, "gateway.max_text_bytes",
          "must be <= gateway.max_message_bytes (" + std::to_string(g.max_message_bytes) +
              "), got " + std::to_string(g.max_text_bytes));

  const std::vector<int>& buckets = c.metrics.latency_buckets_us;
  require(!buckets.empty(), "metrics.latency_buckets_us", "must list at least one bucket bound");
  for (size_t i = 1; i < buckets.size(); ++i) {
    require(buckets[i] > buckets[i - 1], "metrics.latency_buckets_us",
            "must be strictly ascending, got " + std::to_string(buckets[i - 1]) + " then " +
                std::to_string(buckets[i]));
  }

  const BatcherConfig& b = c.batcher;
  const std::vector<int>& preferred = b.preferred_batch_sizes;
  for (size_t i = 0; i < preferred.size(); ++i) {
    const std::string element = "batcher.preferred_batch_sizes[" + std::to_string(i) + "]";
    if (i > 0 && preferred[i] <= preferred[i - 1]) {
      fail(origins.of("batcher.preferred_batch_sizes"),
           "batcher.preferred_batch_sizes must be strictly ascending, got " +
               std::to_string(preferred[i - 1]) + " then " + std::to_string(preferred[i]));
    }
    if (preferred[i] > b.max_batch_size) {
      fail(origins.of("batcher.preferred_batch_sizes"),
           element + " = " + std::to_string(preferred[i]) +
               " is larger than batcher.max_batch_size (" + std::to_string(b.max_batch_size) + ")");
    }
  }
  // A batch always admits its first sequence; a budget below one input would be ignored.
  require(b.max_batch_tokens >= c.model.max_input_tokens, "batcher.max_batch_tokens",
          "must be >= model.max_input_tokens (" + std::to_string(c.model.max_input_tokens) +
              "), got " + std::to_string(b.max_batch_tokens));
  require(b.max_queue_size >= b.max_batch_size, "batcher.max_queue_size",
          "must be >= batcher.max_batch_size (" + std::to_string(b.max_batch_size) + "), got " +
              std::to_string(b.max_queue_size));
  require(b.default_priority_level <= b.priority_levels, "batcher.default_priority_level",
          "must be <= batcher.priority_levels (" + std::to_string(b.priority_levels) + "), got " +
              std::to_string(b.default_priority_level));
  // Otherwise a request with max_texts texts could never be queued.
  require(g.max_texts <= static_cast<size_t>(b.max_queue_size), "gateway.max_texts",
          "must be <= batcher.max_queue_size (" + std::to_string(b.max_queue_size) + "), got " +
              std::to_string(g.max_texts));

  // The noisy channel weighs Aspell's suggestions with both counts.
  const PostprocessorConfig& p = c.postprocessor;
  require(p.word_counts.empty() == p.edit_counts.empty(), "postprocessor.edit_counts",
          "and postprocessor.word_counts go together: set both or neither");
  require(p.word_counts.empty() || !p.aspell_dictionary.empty(), "postprocessor.word_counts",
          "needs postprocessor.aspell_dictionary: it weighs Aspell's suggestions");
}

// Several hubs share a worker replica's capacity; hub replicas bind consecutive ports.
void check_hub_shares(const PipelineConfig& c, const Origins& origins) {
  auto require = [&](bool ok, const std::string& key, const std::string& message) {
    config::require(origins, ok, key, message);
  };
  const GatewayConfig& g = c.gateway;
  const BatcherConfig& b = c.batcher;
  const DecoderConfig& d = c.decoder;
  require(d.max_beams <= d.num_slots, "decoder.max_beams",
          "must be <= decoder.num_slots (" + std::to_string(d.num_slots) +
              "): a beam search holds max_beams slots, got " + std::to_string(d.max_beams));
  // Several hubs share a replica's capacity: each gets a share, and must get enough. A worker
  // serves its hub_endpoints, or else every replica of its hub.
  auto hubs = [](const WorkerConfig& worker, int hub_replicas) {
    return worker.hub_endpoints.empty() ? static_cast<size_t>(hub_replicas)
                                        : worker.hub_endpoints.size();
  };
  const size_t decoder_hubs = hubs(d, c.batcher.replicas);
  require(static_cast<size_t>(d.max_beams) <= static_cast<size_t>(d.num_slots) / decoder_hubs,
          "decoder.max_beams",
          "must be <= decoder.num_slots / the number of decoder.hub_endpoints (" +
              std::to_string(d.num_slots) + " / " + std::to_string(decoder_hubs) +
              "): a beam search must fit one hub's share, got " + std::to_string(d.max_beams));
  for (const auto& [name, worker, hub_replicas] :
       {std::tuple<std::string, const WorkerConfig*, int>{"tokenizer", &c.tokenizer,
                                                          c.gateway.replicas},
        {"encoder", &c.encoder, c.batcher.replicas},
        {"postprocessor", &c.postprocessor, c.batcher.replicas}}) {
    const std::string served = worker->hub_endpoints.empty()
                                   ? "its hub's replicas (" + std::to_string(hub_replicas) + ")"
                                   : "the number of " + name + ".hub_endpoints (" +
                                         std::to_string(worker->hub_endpoints.size()) + ")";
    require(static_cast<size_t>(worker->credits) >= hubs(*worker, hub_replicas), name + ".credits",
            "must be >= " + served + ": every hub gets at least one credit, got " +
                std::to_string(worker->credits));
  }
  // Hub replicas bind consecutive ports: a tcp:// hub endpoint needs a fixed one.
  for (const auto& [key, endpoint, replicas] :
       {std::tuple<std::string, std::string, int>{"gateway.client_endpoint", g.client_endpoint,
                                                  g.replicas},
        {"gateway.tokenizer_endpoint", g.tokenizer_endpoint, g.replicas},
        {"gateway.results_endpoint", g.results_endpoint, g.replicas},
        {"batcher.ingress_endpoint", b.ingress_endpoint, b.replicas},
        {"batcher.encoder_endpoint", b.encoder_endpoint, b.replicas},
        {"batcher.decoder_endpoint", b.decoder_endpoint, b.replicas},
        {"batcher.postprocessor_endpoint", b.postprocessor_endpoint, b.replicas}}) {
    if (replicas > 1 && endpoint.starts_with("tcp://")) {
      const std::string port = endpoint.substr(endpoint.rfind(':') + 1);
      require(port != "0" && port != "*", key,
              "must name a fixed port when its hub has replicas (replica k binds port + k), got '" +
                  endpoint + "'");
    }
  }
}

}  // namespace

void validate_with(const PipelineConfig& c, const Origins& origins) {
  check_each_field(c, origins);
  check_limits(c, origins);
  check_hub_shares(c, origins);
  check_distinct_endpoints(c, origins);
  check_metrics_ports(c, origins);
  check_security(c, origins);
}

void validate(const PipelineConfig& config) {
  validate_with(config, Origins(""));
}

}  // namespace seqpipe::config
