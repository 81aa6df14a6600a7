#include "seqpipe/common/config.h"

#include <arpa/inet.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <utility>

#include "seqpipe/common/metrics.h"
#include "seqpipe/engine/limits.h"

namespace seqpipe::config {
namespace {

// ---------------------------------------------------------------------------------------------
// The one list of keys. Parsing, --set, validation, to_yaml and config_keys all walk it, so a
// new field is one line here (plus its struct member, pipeline.yaml and docs/CONFIG.md, which
// the tests check).

struct Key {
  std::string_view section;  // empty for top-level keys (runtime_dir)
  std::string_view name;
  std::string path() const {
    return section.empty() ? std::string(name) : std::string(section) + "." + std::string(name);
  }
};

// Integers (and the elements of integer lists) must lie in [min, max].
struct IntRule {
  int64_t min;
  int64_t max;
};

enum class TextKind { kPath, kPathList, kRuntimeDir, kEndpoint, kIpv4 };
struct TextRule {
  TextKind kind;
  std::string_view default_socket = {};  // kEndpoint: empty means ipc://{runtime_dir}/<this>
};

// A list of endpoints other processes bind (a worker's hubs): each one checked like an endpoint,
// none empty; {runtime_dir} is replaced; never compared for distinctness (they name others' binds).
struct EndpointListRule {};

constexpr int64_t kMaxPort = 65535;
constexpr IntRule kPortRule{0, kMaxPort};

template <typename Worker, typename Visit>
void worker_fields(std::string_view section, Worker& worker, Visit& visit) {
  visit(Key{section, "replicas"}, worker.replicas, IntRule{1, 64});
  visit(Key{section, "credits"}, worker.credits, IntRule{1, 1024});
  visit(Key{section, "metrics_port"}, worker.metrics_port, kPortRule);
  visit(Key{section, "hub_endpoints"}, worker.hub_endpoints, EndpointListRule{});
}

// Calls visit(Key, member, rule) for every field, in file order. `Config` is PipelineConfig or
// const PipelineConfig.
template <typename Config, typename Visit>
void for_each_field(Config&& c, Visit&& visit) {
  visit(Key{"", "runtime_dir"}, c.runtime_dir, TextRule{TextKind::kRuntimeDir});

  visit(Key{"model", "dir"}, c.model.dir, TextRule{TextKind::kPath});
  visit(Key{"model", "max_input_tokens"}, c.model.max_input_tokens, IntRule{1, 8192});

  visit(Key{"liveness", "heartbeat_interval_ms"}, c.liveness.heartbeat_interval_ms,
        IntRule{10, 60'000});
  visit(Key{"liveness", "heartbeat_liveness"}, c.liveness.heartbeat_liveness, IntRule{1, 100});
  visit(Key{"liveness", "reconnect_max_ms"}, c.liveness.reconnect_max_ms, IntRule{10, 600'000});

  visit(Key{"metrics", "address"}, c.metrics.address, TextRule{TextKind::kIpv4});
  visit(Key{"metrics", "latency_buckets_us"}, c.metrics.latency_buckets_us,
        IntRule{1, 600'000'000});

  auto& g = c.gateway;
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
  visit(Key{"gateway", "batcher_endpoints"}, g.batcher_endpoints, EndpointListRule{});

  worker_fields("tokenizer", c.tokenizer, visit);

  auto& b = c.batcher;
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
  visit(Key{"encoder", "warmup_batch_size"}, c.encoder.warmup_batch_size, IntRule{0, 1024});

  worker_fields("decoder", c.decoder, visit);
  visit(Key{"decoder", "threads"}, c.decoder.threads, IntRule{0, 256});
  visit(Key{"decoder", "num_slots"}, c.decoder.num_slots, IntRule{1, 4096});
  visit(Key{"decoder", "max_beams"}, c.decoder.max_beams, IntRule{1, engine::kMaxBeams});
  visit(Key{"decoder", "max_new_tokens"}, c.decoder.max_new_tokens,
        IntRule{1, engine::kMaxNewTokens});
  visit(Key{"decoder", "warmup_batch_size"}, c.decoder.warmup_batch_size, IntRule{0, 4096});

  worker_fields("postprocessor", c.postprocessor, visit);
  visit(Key{"postprocessor", "known_words"}, c.postprocessor.known_words,
        TextRule{TextKind::kPathList});
}

std::vector<std::string> section_names() {
  std::vector<std::string> sections;
  for_each_field(PipelineConfig{}, [&](Key key, const auto&, const auto&) {
    if (!key.section.empty() && (sections.empty() || sections.back() != key.section)) {
      sections.emplace_back(key.section);
    }
  });
  return sections;
}

// ---------------------------------------------------------------------------------------------
// Messages

[[noreturn]] void fail(const std::string& where, const std::string& message) {
  throw ConfigError(where.empty() ? message : where + ": " + message);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

// " (did you mean X?)" for the closest candidate when it is close enough to be a typo.
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

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Null:
      return "nothing";
    default:
      return "'" + node.Scalar() + "'";
  }
}

std::string range_text(const IntRule& rule) {
  return "[" + std::to_string(rule.min) + ", " + std::to_string(rule.max) + "]";
}

// ---------------------------------------------------------------------------------------------
// Values

// The whole text as a decimal integer, or nothing.
std::optional<int64_t> parse_integer(std::string_view text) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

template <typename T>
void check_int(const std::string& where, const std::string& path, T value, const IntRule& rule) {
  if (std::cmp_less(value, rule.min) || std::cmp_greater(value, rule.max)) {
    fail(where,
         path + " must be an integer in " + range_text(rule) + ", got " + std::to_string(value));
  }
}

// An integer from a scalar node, range-checked, converted to the member's type.
template <typename T>
T int_from_node(const std::string& where, const std::string& path, const YAML::Node& node,
                const IntRule& rule) {
  if (!node.IsScalar()) fail(where, path + " must be an integer, got " + describe(node));
  const std::string& text = node.Scalar();
  const std::optional<int64_t> value = parse_integer(text);
  if (!value) {
    const bool overflowed = text.find_first_of("0123456789") != std::string::npos &&
                            text.find_first_not_of("-0123456789") == std::string::npos;
    fail(where, path + " must be an integer" + (overflowed ? " in " + range_text(rule) : "") +
                    ", got '" + text + "'");
  }
  check_int(where, path, *value, rule);  // the rule's bounds fit every member type
  return static_cast<T>(*value);
}

// ipc:// paths longer than this do not fit sockaddr_un.sun_path (108 bytes with the NUL).
constexpr size_t kMaxIpcPath = 107;

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
  }
}

// ---------------------------------------------------------------------------------------------
// Where each key was last set, so that a cross-field error points at the right file line or
// --set argument.
class Origins {
 public:
  explicit Origins(std::string fallback) : fallback_(std::move(fallback)) {}
  void set(const std::string& path, std::string where) { where_[path] = std::move(where); }
  std::string of(const std::string& path) const {
    const auto it = where_.find(path);
    return it == where_.end() ? fallback_ : it->second;
  }

 private:
  std::string fallback_;
  std::map<std::string, std::string> where_;
};

// Assigns one field from a YAML node (a file value, or a parsed --set list), checking it.
template <typename Member, typename Rule>
void assign_from_node(const std::string& where, const Key& key, const YAML::Node& node,
                      Member& member, const Rule& rule) {
  const std::string path = key.path();
  if constexpr (std::is_same_v<Member, std::string>) {
    if (node.IsNull()) {
      member.clear();  // `key:` with no value: the default (empty) string
    } else if (node.IsScalar()) {
      member = node.Scalar();
    } else {
      fail(where, path + " must be a string, got " + describe(node));
    }
    check_text(where, key, member, rule);
  } else if constexpr (std::is_same_v<Member, std::vector<std::string>>) {
    if (node.IsNull()) {
      member.clear();
      return;
    }
    if (!node.IsSequence())
      fail(where, path + " must be a list of endpoints like [\"ipc:///run/a.sock\"], got " +
                      describe(node));
    std::vector<std::string> values;
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string element = path + "[" + std::to_string(i) + "]";
      if (!node[i].IsScalar())
        fail(where, element + " must be an endpoint, got " + describe(node[i]));
      values.push_back(node[i].Scalar());
      check_list_endpoint(where, element, values.back());
    }
    member = std::move(values);
  } else if constexpr (std::is_same_v<Member, std::vector<int>>) {
    if (node.IsNull()) {
      member.clear();
      return;
    }
    if (!node.IsSequence())
      fail(where, path + " must be a list of integers like [8, 16], got " + describe(node));
    std::vector<int> values;
    for (size_t i = 0; i < node.size(); ++i) {
      values.push_back(
          int_from_node<int>(where, path + "[" + std::to_string(i) + "]", node[i], rule));
    }
    member = std::move(values);
  } else {
    member = int_from_node<Member>(where, path, node, rule);
  }
}

std::string mark_text(const YAML::Mark& mark) {
  return mark.line >= 0 ? ":" + std::to_string(mark.line + 1) : "";
}

class Loader {
 public:
  explicit Loader(std::string source) : source_(std::move(source)), origins_(source_) {}

  void load_document(const std::string& text) {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      fail(source_ + mark_text(e.mark) +
               (e.mark.column >= 0 ? ":" + std::to_string(e.mark.column + 1) : ""),
           "not valid YAML: " + e.msg);
    }
    if (root.IsNull()) return;  // an empty file: every default
    if (!root.IsMap())
      fail(source_ + mark_text(root.Mark()), "the top level must be a mapping of sections");
    const std::vector<std::string> sections = section_names();
    std::vector<std::string> top_level = sections;
    top_level.emplace_back("runtime_dir");
    for_each_entry(root, "", [&](const YAML::Node& key_node, const YAML::Node& value) {
      const std::string name = key_node.Scalar();
      if (name == "runtime_dir") {
        load_field(Key{"", "runtime_dir"}, key_node, value);
        return;
      }
      const auto section = std::find(sections.begin(), sections.end(), name);
      if (section == sections.end()) {
        fail(where(key_node), "unknown key '" + name + "'" + did_you_mean(name, top_level));
      }
      if (value.IsNull()) return;  // `batcher:` with nothing under it: every default
      if (!value.IsMap())
        fail(where(value, key_node), name + " must be a mapping of keys, got " + describe(value));
      load_section(*section, value);
    });
  }

  void apply_override(const std::string& assignment) {
    const std::string where = "--set " + assignment;
    const size_t eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0) fail(where, "expected key=value");
    const std::string path = assignment.substr(0, eq);
    const std::string text = assignment.substr(eq + 1);
    bool found = false;
    for_each_field(config_, [&](Key key, auto& member, const auto& rule) {
      if (key.path() != path) return;
      found = true;
      using Member = std::remove_reference_t<decltype(member)>;
      if constexpr (std::is_same_v<Member, std::string>) {
        member = text;  // taken as written: no YAML quoting to get wrong on a shell line
        check_text(where, key, member, rule);
      } else {
        YAML::Node value;
        try {
          value = YAML::Load(text);
        } catch (const YAML::Exception& e) {
          fail(where, path + ": value is not valid YAML: " + e.msg);
        }
        if (value.IsNull() && !text.empty())
          value = YAML::Node(text);  // e.g. "~": report it as written
        assign_from_node(where, key, value, member, rule);
      }
      origins_.set(path, where);
    });
    if (!found) fail(where, "unknown key '" + path + "'" + did_you_mean(path, config_keys()));
  }

  PipelineConfig finish() const;

 private:
  std::string where(const YAML::Node& node, const YAML::Node& fallback = {}) const {
    const YAML::Mark mark = node.Mark();
    // A missing value (`key:`) is marked where the next token starts: point at its key instead.
    if ((mark.line < 0 || node.IsNull()) && fallback.IsDefined())
      return source_ + mark_text(fallback.Mark());
    return source_ + mark_text(mark);
  }

  // Calls f(key, value) for each entry of a mapping, refusing non-scalar and duplicate keys
  // (yaml-cpp keeps duplicates; the second would silently win).
  template <typename F>
  void for_each_entry(const YAML::Node& map, const std::string& prefix, F&& f) {
    std::map<std::string, int> first_line;
    for (const auto& entry : map) {
      const YAML::Node key_node = entry.first;  // a copy: Node is a handle, cheap to copy
      if (!key_node.IsScalar())
        fail(where(key_node), "keys must be plain names, got " + describe(key_node));
      const std::string name = key_node.Scalar();
      const auto [seen, inserted] = first_line.emplace(name, key_node.Mark().line + 1);
      if (!inserted) {
        fail(where(key_node), "duplicate key '" + prefix + name + "' (first at line " +
                                  std::to_string(seen->second) + ")");
      }
      f(key_node, entry.second);
    }
  }

  void load_section(const std::string& section, const YAML::Node& map) {
    std::vector<std::string> names;
    for_each_field(PipelineConfig{}, [&](Key key, const auto&, const auto&) {
      if (key.section == section) names.emplace_back(key.name);
    });
    for_each_entry(map, section + ".", [&](const YAML::Node& key_node, const YAML::Node& value) {
      const std::string name = key_node.Scalar();
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        fail(where(key_node),
             "unknown key '" + section + "." + name + "'" + did_you_mean(name, names));
      }
      load_field(Key{section, name}, key_node, value);
    });
  }

  void load_field(const Key& wanted, const YAML::Node& key_node, const YAML::Node& value) {
    const std::string at = where(value, key_node);
    for_each_field(config_, [&](Key key, auto& member, const auto& rule) {
      if (key.section == wanted.section && key.name == wanted.name) {
        assign_from_node(at, key, value, member, rule);
        origins_.set(key.path(), at);
      }
    });
  }

  std::string source_;
  Origins origins_;
  PipelineConfig config_;
};

// ---------------------------------------------------------------------------------------------
// Validation

// The endpoint as resolve_endpoints will write it, before the runtime directory is known.
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
  add("gateway", c.gateway.metrics_port, 1);
  add("tokenizer", c.tokenizer.metrics_port, c.tokenizer.replicas);
  add("batcher", c.batcher.metrics_port, 1);
  add("encoder", c.encoder.metrics_port, c.encoder.replicas);
  add("decoder", c.decoder.metrics_port, c.decoder.replicas);
  add("postprocessor", c.postprocessor.metrics_port, c.postprocessor.replicas);
}

void validate_with(const PipelineConfig& c, const Origins& origins) {
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
    } else {
      check_int(where, key.path(), member, rule);
    }
  });

  // Across fields: each message names the key most likely at fault first.
  auto require = [&](bool ok, const std::string& key, const std::string& message) {
    if (!ok) fail(origins.of(key), key + " " + message);
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

  const DecoderConfig& d = c.decoder;
  require(d.max_beams <= d.num_slots, "decoder.max_beams",
          "must be <= decoder.num_slots (" + std::to_string(d.num_slots) +
              "): a beam search holds max_beams slots, got " + std::to_string(d.max_beams));
  // Several hubs share a replica's capacity: each gets a share, and must get enough.
  const size_t decoder_hubs = std::max<size_t>(1, d.hub_endpoints.size());
  require(static_cast<size_t>(d.max_beams) <= static_cast<size_t>(d.num_slots) / decoder_hubs,
          "decoder.max_beams",
          "must be <= decoder.num_slots / the number of decoder.hub_endpoints (" +
              std::to_string(d.num_slots) + " / " + std::to_string(decoder_hubs) +
              "): a beam search must fit one hub's share, got " + std::to_string(d.max_beams));
  for (const auto& [name, worker] :
       {std::pair<std::string, const WorkerConfig*>{"tokenizer", &c.tokenizer},
        {"encoder", &c.encoder},
        {"postprocessor", &c.postprocessor}}) {
    require(static_cast<size_t>(worker->credits) >= worker->hub_endpoints.size(), name + ".credits",
            "must be >= the number of " + name + ".hub_endpoints (" +
                std::to_string(worker->hub_endpoints.size()) +
                "): every hub gets at least one credit, got " + std::to_string(worker->credits));
  }

  check_distinct_endpoints(c, origins);
  check_metrics_ports(c, origins);
}

PipelineConfig Loader::finish() const {
  validate_with(config_, origins_);
  return config_;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot read: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(path, std::string("cannot read: ") + std::strerror(errno));
  return text.str();
}

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

std::string usage_line(std::string_view program) {
  return "usage: " + std::string(program) + " [--config FILE] [--set key=value ...] [--help]";
}

}  // namespace

// ---------------------------------------------------------------------------------------------

PipelineConfig load_config_text(const std::string& yaml, const std::string& source_name,
                                const std::vector<std::string>& overrides) {
  Loader loader(source_name);
  loader.load_document(yaml);
  for (const std::string& assignment : overrides) loader.apply_override(assignment);
  return loader.finish();
}

PipelineConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return load_config_text(read_file(path), path, overrides);
}

void validate(const PipelineConfig& config) {
  validate_with(config, Origins(""));
}

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for_each_field(PipelineConfig{},
                 [&](Key key, const auto&, const auto&) { keys.push_back(key.path()); });
  return keys;
}

std::string to_yaml(const PipelineConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::string_view open_section;
  for_each_field(config, [&](Key key, const auto& member, const auto&) {
    if (key.section != open_section) {
      if (!open_section.empty()) out << YAML::EndMap;
      out << YAML::Key << std::string(key.section) << YAML::Value << YAML::BeginMap;
      open_section = key.section;
    }
    out << YAML::Key << std::string(key.name) << YAML::Value;
    using Member = std::decay_t<decltype(member)>;
    if constexpr (std::is_same_v<Member, std::string>) {
      out << YAML::DoubleQuoted << member;  // quoted: an empty endpoint stays visible as ""
    } else if constexpr (std::is_same_v<Member, std::vector<int>>) {
      out << YAML::Flow << YAML::BeginSeq;
      for (int v : member) out << v;
      out << YAML::EndSeq;
    } else if constexpr (std::is_same_v<Member, std::vector<std::string>>) {
      out << YAML::Flow << YAML::BeginSeq;
      for (const std::string& v : member) out << YAML::DoubleQuoted << v;
      out << YAML::EndSeq;
    } else {
      out << member;
    }
  });
  if (!open_section.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

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
  return config;
}

ServiceArgs parse_service_args(int argc, char** argv) {
  ServiceArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    // The value of a flag given as "--flag value" or "--flag=value".
    auto value_of = [&](std::string_view flag) -> std::optional<std::string> {
      if (arg == flag) {
        if (i + 1 >= argc) fail("", std::string(flag) + " needs a value");
        return std::string(argv[++i]);
      }
      if (arg.starts_with(std::string(flag) + "=")) return arg.substr(flag.size() + 1);
      return std::nullopt;
    };
    if (arg == "--help" || arg == "-h") {
      args.help = true;
      return args;  // --help wins over anything else on the line
    }
    if (std::optional<std::string> path = value_of("--config")) {
      if (!args.config_path.empty()) fail("", "--config given twice");
      if (path->empty()) fail("", "--config needs a file name");
      args.config_path = *path;
    } else if (std::optional<std::string> assignment = value_of("--set")) {
      const size_t eq = assignment->find('=');
      if (eq == std::string::npos || eq == 0)
        fail("", "--set needs key=value, got '" + *assignment + "'");
      args.overrides.push_back(*assignment);
    } else {
      fail("", "unknown argument '" + arg + "'");
    }
  }
  return args;
}

int run_service_main(int argc, char** argv, std::string_view service_name, std::string_view summary,
                     const std::function<int(const PipelineConfig&)>& run) {
  const std::string program = "seqpipe-" + std::string(service_name);
  ServiceArgs args;
  try {
    args = parse_service_args(argc, argv);
  } catch (const ConfigError& e) {
    std::cerr << program << ": " << e.what() << "\n" << usage_line(program) << "\n";
    return 2;
  }
  PipelineConfig config;
  try {
    if (args.help) {
      std::cout
          << usage_line(program) << "\n\n"
          << summary << "\n\n"
          << "  --config FILE     the pipeline config (default: " << kDefaultConfigPath
          << " in the working\n"
          << "                    directory if it exists, else the built-in defaults)\n"
          << "  --set key=value   override one key after the file is read; repeatable, applied\n"
          << "                    in order, e.g. --set batcher.max_batch_size=16\n"
          << "                    --set batcher.preferred_batch_sizes=[4,8]\n"
          << "  --help            this text\n\n"
          << "Every key is documented in docs/CONFIG.md and " << kDefaultConfigPath << ".\n"
          << "Exit status: 0 success, 1 failure while running, 2 bad usage or config.\n"
          << std::flush;
      return 0;
    }
    std::string path = args.config_path;
    if (path.empty()) {
      std::error_code ec;
      if (std::filesystem::exists(kDefaultConfigPath, ec)) {
        path = kDefaultConfigPath;
      } else {
        std::cerr << program << ": no " << kDefaultConfigPath
                  << " in the working directory and no --config: using the built-in defaults\n";
      }
    }
    config = path.empty() ? load_config_text("", "built-in defaults", args.overrides)
                          : load_config(path, args.overrides);

    // The only place the environment is read: everything below gets the resolved config.
    const std::string runtime_dir =
        choose_runtime_dir(config.runtime_dir, std::getenv("XDG_RUNTIME_DIR"), getuid());
    config = resolve_endpoints(std::move(config), runtime_dir);
    std::error_code ec;
    if (std::filesystem::create_directories(config.runtime_dir, ec)) {
      // Our sockets: other users have no business connecting to them.
      std::filesystem::permissions(config.runtime_dir, std::filesystem::perms::owner_all, ec);
    }
    if (ec) fail("", "runtime_dir: cannot create '" + config.runtime_dir + "': " + ec.message());
  } catch (const ConfigError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  }
  try {
    metrics::set_latency_buckets(config.metrics.latency_buckets_us);  // before any metric is built
    return run(config);
  } catch (const ConfigError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace seqpipe::config
