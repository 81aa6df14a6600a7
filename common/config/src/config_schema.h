#pragma once
// The config's schema: every key with its section, name, struct member and rule, in file order.
// Loading (YAML and --set), validation, resolve_endpoints, to_yaml and config_keys all walk this
// one table; the defaults are the struct members' initialisers in seqpipe/config/config.h. A new
// field is one line here, plus its struct member, config/pipeline.yaml and docs/CONFIG.md (the
// tests check that the three agree).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "seqpipe/config/config.h"
#include "seqpipe/generation/limits.h"

namespace seqpipe::config {

struct Key {
  std::string_view section;  // empty for top-level keys (runtime_dir)
  std::string_view name;
  // A setting of the model rather than of the machine or the deployment: the model directory's
  // own seqpipe.yaml may set it (model_overrides), and nothing else may be set there.
  bool per_model = false;
  std::string path() const {
    return section.empty() ? std::string(name) : std::string(section) + "." + std::string(name);
  }
};

// Integers (and the elements of integer lists) must lie in [min, max].
struct IntRule {
  int64_t min;
  int64_t max;
};

enum class TextKind {
  kPath,
  kOptionalPath,  // empty: off
  kPathList,
  kRuntimeDir,
  kEndpoint,
  kIpv4,
  kHttpAddress,
  kName,
  kDevice,    // cpu, cuda or cuda:N: the characters here, the form where the engine loads
  kModelName  // empty, or a model name (config::valid_model_name)
};
struct TextRule {
  TextKind kind;
  std::string_view default_socket = {};  // kEndpoint: empty means ipc://{runtime_dir}/<this>
};

// true or false.
struct BoolRule {};

// A list of endpoints other processes bind (a worker's hubs): each one checked like an endpoint,
// none empty; {runtime_dir} is replaced; never compared for distinctness (they name others' binds).
struct EndpointListRule {};

constexpr bool kPerModel = true;

constexpr int64_t kMaxPort = 65535;
constexpr IntRule kPortRule{0, kMaxPort};

template <typename Worker, typename Visit>
void worker_fields(std::string_view section, Worker& worker, Visit& visit) {
  visit(Key{section, "replicas"}, worker.replicas, IntRule{0, 64});  // 0: auto
  visit(Key{section, "credits"}, worker.credits, IntRule{1, 1024});
  visit(Key{section, "metrics_port"}, worker.metrics_port, kPortRule);
  visit(Key{section, "hub_endpoints"}, worker.hub_endpoints, EndpointListRule{});
}

template <typename Model, typename Visit>
void model_fields(Model& m, Visit& visit) {
  visit(Key{"model", "dir"}, m.dir, TextRule{TextKind::kPath});
  visit(Key{"model", "max_input_tokens", kPerModel}, m.max_input_tokens, IntRule{1, 8192});
  visit(Key{"model", "compute_type"}, m.compute_type, TextRule{TextKind::kName});
  visit(Key{"model", "device"}, m.device, TextRule{TextKind::kDevice});
  visit(Key{"model", "cuda_graphs"}, m.cuda_graphs, IntRule{0, 1});
  visit(Key{"model", "lower_case_words", kPerModel}, m.lower_case_words, IntRule{0, 1});
  visit(Key{"model", "name"}, m.name, TextRule{TextKind::kModelName});
  visit(Key{"model", "version"}, m.version, IntRule{1, protocol::kMaxModelVersion});
  visit(Key{"model", "repository"}, m.repository, TextRule{TextKind::kOptionalPath});
  visit(Key{"model", "repository_poll_ms"}, m.repository_poll_ms, IntRule{0, 3'600'000});
  visit(Key{"model", "repository_versions"}, m.repository_versions, IntRule{0, 1000});
}

// The gateway's fields (for_each_field's).
template <typename Gateway, typename Visit>
void gateway_fields(Gateway& g, Visit&& visit) {
  visit(Key{"gateway", "client_endpoint"}, g.client_endpoint,
        TextRule{TextKind::kEndpoint, "gateway.sock"});
  visit(Key{"gateway", "tokenizer_endpoint"}, g.tokenizer_endpoint,
        TextRule{TextKind::kEndpoint, "tokenizer.sock"});
  visit(Key{"gateway", "results_endpoint"}, g.results_endpoint,
        TextRule{TextKind::kEndpoint, "results.sock"});
  visit(Key{"gateway", "default_timeout_ms"}, g.default_timeout_ms, IntRule{1, 3'600'000});
  visit(Key{"gateway", "max_timeout_ms"}, g.max_timeout_ms, IntRule{1, 3'600'000});
  visit(Key{"gateway", "max_message_bytes"}, g.max_message_bytes,
        IntRule{1024, int64_t{256} << 20});
  visit(Key{"gateway", "max_texts"}, g.max_texts, IntRule{1, 4096});
  visit(Key{"gateway", "max_text_bytes"}, g.max_text_bytes, IntRule{1, int64_t{16} << 20});
  visit(Key{"gateway", "metrics_port"}, g.metrics_port, kPortRule);
  visit(Key{"gateway", "cache_bytes"}, g.cache_bytes, IntRule{0, int64_t{1} << 36});
  visit(Key{"gateway", "split_words", kPerModel}, g.split_words, IntRule{0, 4096});
  visit(Key{"gateway", "batcher_endpoints"}, g.batcher_endpoints, EndpointListRule{});
  visit(Key{"gateway", "http_endpoint"}, g.http_endpoint, TextRule{TextKind::kHttpAddress});
  visit(Key{"gateway", "repository_api_public"}, g.repository_api_public, BoolRule{});
  visit(Key{"gateway", "repository_token_file"}, g.repository_token_file,
        TextRule{TextKind::kOptionalPath});
  visit(Key{"gateway", "grpc_endpoint"}, g.grpc_endpoint, TextRule{TextKind::kHttpAddress});
  visit(Key{"gateway", "replicas"}, g.replicas, IntRule{1, 16});
}

// The postprocessor's own fields, after worker_fields' (for_each_field's).
template <typename Postprocessor, typename Visit>
void postprocessor_fields(Postprocessor& p, Visit&& visit) {
  visit(Key{"postprocessor", "known_words", kPerModel}, p.known_words,
        TextRule{TextKind::kPathList});
  visit(Key{"postprocessor", "known_word_votes", kPerModel}, p.known_word_votes, IntRule{0, 16});
  visit(Key{"postprocessor", "known_word_margin", kPerModel}, p.known_word_margin,
        IntRule{0, 10'000});
  visit(Key{"postprocessor", "user_words", kPerModel}, p.user_words, TextRule{TextKind::kPathList});
  visit(Key{"postprocessor", "aspell_dictionary", kPerModel}, p.aspell_dictionary,
        TextRule{TextKind::kPathList});
  visit(Key{"postprocessor", "aspell_left_words", kPerModel}, p.aspell_left_words, IntRule{0, 1});
  visit(Key{"postprocessor", "word_counts", kPerModel}, p.word_counts,
        TextRule{TextKind::kPathList});
  visit(Key{"postprocessor", "edit_counts", kPerModel}, p.edit_counts,
        TextRule{TextKind::kPathList});
  visit(Key{"postprocessor", "confusion_counts", kPerModel}, p.confusion_counts,
        TextRule{TextKind::kPathList});
  visit(Key{"postprocessor", "confusion_margin", kPerModel}, p.confusion_margin,
        IntRule{0, 10'000});
}

// Calls visit(Key, member, rule) for every field, in file order. `Config` is PipelineConfig or
// const PipelineConfig.
template <typename Config, typename Visit>
void for_each_field(Config&& c, Visit&& visit) {
  visit(Key{"", "runtime_dir"}, c.runtime_dir, TextRule{TextKind::kRuntimeDir});

  model_fields(c.model, visit);

  visit(Key{"liveness", "heartbeat_interval_ms"}, c.liveness.heartbeat_interval_ms,
        IntRule{10, 60'000});
  visit(Key{"liveness", "heartbeat_liveness"}, c.liveness.heartbeat_liveness, IntRule{1, 100});
  visit(Key{"liveness", "reconnect_max_ms"}, c.liveness.reconnect_max_ms, IntRule{10, 600'000});

  visit(Key{"metrics", "address"}, c.metrics.address, TextRule{TextKind::kIpv4});
  visit(Key{"metrics", "latency_buckets_us"}, c.metrics.latency_buckets_us,
        IntRule{1, 600'000'000});

  gateway_fields(c.gateway, visit);

  worker_fields("tokenizer", c.tokenizer, visit);

  auto& b = c.batcher;
  visit(Key{"batcher", "replicas"}, b.replicas, IntRule{1, 16});
  visit(Key{"batcher", "ingress_endpoint"}, b.ingress_endpoint,
        TextRule{TextKind::kEndpoint, "batcher-in.sock"});
  visit(Key{"batcher", "encoder_endpoint"}, b.encoder_endpoint,
        TextRule{TextKind::kEndpoint, "encoder.sock"});
  visit(Key{"batcher", "decoder_endpoint"}, b.decoder_endpoint,
        TextRule{TextKind::kEndpoint, "decoder.sock"});
  visit(Key{"batcher", "postprocessor_endpoint"}, b.postprocessor_endpoint,
        TextRule{TextKind::kEndpoint, "postprocessor.sock"});
  visit(Key{"batcher", "max_batch_size"}, b.max_batch_size, IntRule{1, 1024});
  visit(Key{"batcher", "preferred_batch_sizes"}, b.preferred_batch_sizes, IntRule{1, 1024});
  visit(Key{"batcher", "max_queue_delay_us"}, b.max_queue_delay_us, IntRule{0, 10'000'000});
  visit(Key{"batcher", "max_batch_tokens"}, b.max_batch_tokens, IntRule{1, 1 << 20});
  visit(Key{"batcher", "max_queue_size"}, b.max_queue_size, IntRule{1, 1 << 20});
  visit(Key{"batcher", "priority_levels"}, b.priority_levels, IntRule{1, 16});
  visit(Key{"batcher", "default_priority_level"}, b.default_priority_level, IntRule{1, 16});
  visit(Key{"batcher", "metrics_port"}, b.metrics_port, kPortRule);

  worker_fields("encoder", c.encoder, visit);
  visit(Key{"encoder", "threads"}, c.encoder.threads, IntRule{0, 256});
  visit(Key{"encoder", "compute_type"}, c.encoder.compute_type, TextRule{TextKind::kName});
  visit(Key{"encoder", "warmup_batch_size"}, c.encoder.warmup_batch_size, IntRule{0, 1024});

  worker_fields("decoder", c.decoder, visit);
  visit(Key{"decoder", "threads"}, c.decoder.threads, IntRule{0, 256});
  visit(Key{"decoder", "compute_type"}, c.decoder.compute_type, TextRule{TextKind::kName});
  visit(Key{"decoder", "num_slots"}, c.decoder.num_slots, IntRule{1, 4096});
  visit(Key{"decoder", "max_beams", kPerModel}, c.decoder.max_beams,
        IntRule{1, generation::kMaxBeams});
  visit(Key{"decoder", "max_new_tokens", kPerModel}, c.decoder.max_new_tokens,
        IntRule{1, generation::kMaxNewTokens});
  visit(Key{"decoder", "warmup_batch_size"}, c.decoder.warmup_batch_size, IntRule{0, 4096});

  worker_fields("postprocessor", c.postprocessor, visit);
  postprocessor_fields(c.postprocessor, visit);

  auto& s = c.security;
  visit(Key{"security", "server_key"}, s.server_key, TextRule{TextKind::kOptionalPath});
  visit(Key{"security", "client_key"}, s.client_key, TextRule{TextKind::kOptionalPath});
  visit(Key{"security", "allowed_clients"}, s.allowed_clients, TextRule{TextKind::kOptionalPath});
  visit(Key{"security", "allow_plaintext"}, s.allow_plaintext, BoolRule{});
}

// The sections, in file order.
inline std::vector<std::string> section_names() {
  std::vector<std::string> sections;
  for_each_field(PipelineConfig{}, [&](Key key, const auto&, const auto&) {
    if (!key.section.empty() && (sections.empty() || sections.back() != key.section)) {
      sections.emplace_back(key.section);
    }
  });
  return sections;
}
}  // namespace seqpipe::config
