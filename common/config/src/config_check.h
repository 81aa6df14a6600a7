#pragma once
// Checking a config: the messages (where: what, with did-you-mean), each value on its own (the
// loader calls these as it reads), and the whole config across fields (validate_with). Every
// failure is a ConfigError naming the source and the key.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config_schema.h"
#include "seqpipe/config/config.h"

namespace seqpipe::config {

// Throws ConfigError("where: message"), or just the message when `where` is empty.
[[noreturn]] void fail(const std::string& where, const std::string& message);

// The text of a model directory's config file (config.json, seqpipe.yaml); ConfigError when it
// cannot be read or is over `cap` bytes (engine/model_files.h), refused before it is read.
std::string read_model_file(const std::string& path, unsigned long long cap);

// " (did you mean X?)" for the closest candidate when it is close enough to be a typo, else "".
std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates);

// "[min, max]"
std::string range_text(const IntRule& rule);

// The whole text as a decimal integer, or nothing.
std::optional<int64_t> parse_integer(std::string_view text);

template <typename T>
void check_int(const std::string& where, const std::string& path, T value, const IntRule& rule) {
  if (std::cmp_less(value, rule.min) || std::cmp_greater(value, rule.max)) {
    fail(where,
         path + " must be an integer in " + range_text(rule) + ", got " + std::to_string(value));
  }
}

// One element of an endpoint list: not empty, and a valid endpoint.
void check_list_endpoint(const std::string& where, const std::string& path,
                         const std::string& endpoint);
void check_text(const std::string& where, const Key& key, const std::string& value,
                const TextRule& rule);

// ipc:// paths longer than this do not fit sockaddr_un.sun_path (108 bytes with the NUL).
constexpr size_t kMaxIpcPath = 107;

// The endpoint as resolve_endpoints will write it, before the runtime directory is known.
std::string effective_endpoint(const std::string& endpoint, const TextRule& rule);

// Where each key was last set, so that a cross-field error points at the right file line or
// --set argument.
class Origins {
 public:
  explicit Origins(std::string fallback) : fallback_(std::move(fallback)) {}
  void set(const std::string& path, std::string where) { where_[path] = std::move(where); }
  bool contains(const std::string& path) const { return where_.contains(path); }
  std::string of(const std::string& path) const {
    const auto it = where_.find(path);
    return it == where_.end() ? fallback_ : it->second;
  }

 private:
  std::string fallback_;
  std::map<std::string, std::string> where_;
};

// A tcp:// endpoint whose address, as ZeroMQ binds it (after a "source;" part), is not loopback
// (an IPv4 literal 127.x, localhost, [::1], the interface lo): another machine may reach it.
// ipc:// and inproc:// never are.
bool beyond_loopback(std::string_view endpoint);
// loopback_host (config.h) judges the address.

// Two binding endpoints that are the same address (after defaults) are an error.
void check_distinct_endpoints(const PipelineConfig& c, const Origins& origins);

// Every field on its own, then across fields; errors point at origins.of(key).
void validate_with(const PipelineConfig& c, const Origins& origins);

// load_pipeline_config's layers (config.h), validated, before the runtime directory is chosen:
// `path` empty reads no file.
LoadedConfig load_layers(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace seqpipe::config
