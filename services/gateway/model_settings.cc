#include "gateway/model_settings.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace seqpipe::gateway {
namespace {
void warn_not_loaded(const std::string& key, const std::string& why) {
  spdlog::warn(
      "gateway: model {}'s config does not load; its requests are answered unavailable: {}", key,
      why);
}
}  // namespace

ModelSettingsTable::ModelSettingsTable(const config::PipelineConfig& pipeline,
                                       VersionConfig version_config)
    : pipeline_(model_control::version_settings(pipeline)),
      version_config_(std::move(version_config)),
      decode_limits_(pipeline_.limits) {}

ModelSettings ModelSettingsTable::load_version(const config::ModelVersion& m,
                                               const std::string& key) const {
  ModelSettings settings = model_control::load_version_settings(version_config_, m);
  if (!settings.not_loaded.empty()) {
    warn_not_loaded(key, settings.not_loaded);
  }
  return settings;
}

void ModelSettingsTable::load(const config::ModelCatalog& catalog) {
  versions_.clear();
  // A single model's requests get the gateway's own settings: of() answers them.
  if (!catalog.single() && version_config_) {
    for (const config::ModelVersion& m : catalog.models()) {
      const std::string key = catalog.key_of(m);
      versions_.emplace(key, load_version(m, key));
    }
  }
  update_decode_limits();
}

void ModelSettingsTable::set(const std::vector<model_control::CatalogEntry>& catalog) {
  std::map<std::string, ModelSettings> versions;
  for (const auto& [m, settings] : catalog) {
    const std::string key = config::model_key(m.name, m.version);
    const auto known = versions_.find(key);
    // Said once, not with each refresh of the same catalog.
    if (!settings.not_loaded.empty() &&
        (known == versions_.end() || known->second.not_loaded != settings.not_loaded)) {
      warn_not_loaded(key, settings.not_loaded);
    }
    versions.insert_or_assign(key, settings);
  }
  versions_ = std::move(versions);
  update_decode_limits();
}

void ModelSettingsTable::update_decode_limits() {
  // The loosest caps of the versions that load (the gateway's own when none does).
  decode_limits_ = pipeline_.limits;
  int tokens = 0, beams = 0;
  for (const auto& [key, settings] : versions_) {
    if (!settings.not_loaded.empty()) continue;
    tokens = std::max(tokens, settings.limits.max_new_tokens_cap);
    beams = std::max(beams, settings.limits.max_beams);
  }
  if (tokens > 0) {
    decode_limits_.max_new_tokens_cap = tokens;
    decode_limits_.max_beams = beams;
  }
}

const ModelSettings& ModelSettingsTable::of(const std::string& key) const {
  auto it = versions_.find(key);
  return it == versions_.end() ? pipeline_ : it->second;
}

bool ModelSettingsTable::needs_own_decode(const ModelSettings& settings) const {
  return settings.limits.max_new_tokens_cap != decode_limits_.max_new_tokens_cap ||
         settings.limits.max_beams != decode_limits_.max_beams;
}

RequestLimits ModelSettingsTable::request_limits() const {
  RequestLimits limits{decode_limits_, {}};
  for (const auto& [key, settings] : versions_) {
    if (settings.not_loaded.empty() && needs_own_decode(settings))
      limits.own.emplace(key, settings.limits);
  }
  return limits;
}

}  // namespace seqpipe::gateway
