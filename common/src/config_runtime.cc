// Where a config meets the machine: the runtime directory (from the environment, read only in
// load_pipeline_config) and the endpoints made concrete in it.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "config_check.h"
#include "config_schema.h"
#include "seqpipe/common/config.h"

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
  return config;
}

LoadedConfig load_pipeline_config(const std::string& config_path,
                                  const std::vector<std::string>& overrides) {
  std::string path = config_path;
  std::error_code ec;
  if (path.empty() && std::filesystem::exists(kDefaultConfigPath, ec)) {
    path = kDefaultConfigPath;
  }
  PipelineConfig config = path.empty() ? load_config_text("", "built-in defaults", overrides)
                                       : load_config(path, overrides);
  // The only place the environment is read: everything below gets the resolved config.
  const std::string runtime_dir =
      choose_runtime_dir(config.runtime_dir, std::getenv("XDG_RUNTIME_DIR"), ::getuid());
  return {resolve_endpoints(std::move(config), runtime_dir), path};
}

}  // namespace seqpipe::config
