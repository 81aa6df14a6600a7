#include "gateway/model_settings.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <utility>

namespace seqpipe::gateway {

protocol::Limits protocol_limits(const config::PipelineConfig& c) {
  protocol::Limits limits;
  limits.max_message_bytes = c.gateway.max_message_bytes;
  limits.max_texts = c.gateway.max_texts;
  limits.max_text_bytes = c.gateway.max_text_bytes;
  limits.max_new_tokens_cap = c.decoder.max_new_tokens;
  limits.max_beams = std::min(c.decoder.max_beams, c.decoder.num_slots);
  limits.max_timeout_ms = c.gateway.max_timeout_ms;
  limits.priority_levels = c.batcher.priority_levels;
  return limits;
}

ModelSettings model_settings(const config::PipelineConfig& c) {
  return {protocol_limits(c), static_cast<size_t>(c.gateway.split_words), ""};
}

ModelSettingsTable::ModelSettingsTable(const config::PipelineConfig& pipeline,
                                       VersionConfig version_config)
    : pipeline_(model_settings(pipeline)),
      version_config_(std::move(version_config)),
      decode_limits_(pipeline_.limits) {}

ModelSettingsTable::Version ModelSettingsTable::load_version(const config::ModelVersion& m,
                                                             const std::string& key) const {
  Version v{m.dir, pipeline_};
  try {
    v.settings = model_settings(version_config_(m));
  } catch (const std::exception& e) {
    v.settings.not_loaded = e.what();
    spdlog::warn(
        "gateway: model {}'s config does not load; its requests are answered "
        "unavailable: {}",
        key, e.what());
  }
  return v;
}

void ModelSettingsTable::update(const config::ModelCatalog& catalog) {
  std::map<std::string, Version> versions;
  // A single model's requests get the gateway's own settings: of() answers them.
  if (!catalog.single() && version_config_) {
    for (const config::ModelVersion& m : catalog.models()) {
      const std::string key = catalog.key_of(m);
      auto known = versions_.find(key);
      if (known != versions_.end() && known->second.dir == m.dir &&
          known->second.settings.not_loaded.empty()) {  // one that failed is tried again
        versions.emplace(key, std::move(known->second));
      } else {
        versions.emplace(key, load_version(m, key));
      }
    }
  }
  versions_ = std::move(versions);
  // The loosest caps of the versions that load (the gateway's own when none does).
  decode_limits_ = pipeline_.limits;
  int tokens = 0, beams = 0;
  for (const auto& [key, v] : versions_) {
    if (!v.settings.not_loaded.empty()) continue;
    tokens = std::max(tokens, v.settings.limits.max_new_tokens_cap);
    beams = std::max(beams, v.settings.limits.max_beams);
  }
  if (tokens > 0) {
    decode_limits_.max_new_tokens_cap = tokens;
    decode_limits_.max_beams = beams;
  }
}

const ModelSettings& ModelSettingsTable::of(const std::string& key) const {
  auto it = versions_.find(key);
  return it == versions_.end() ? pipeline_ : it->second.settings;
}

bool ModelSettingsTable::needs_own_decode(const ModelSettings& settings) const {
  return settings.limits.max_new_tokens_cap != decode_limits_.max_new_tokens_cap ||
         settings.limits.max_beams != decode_limits_.max_beams;
}

RequestLimits ModelSettingsTable::request_limits() const {
  RequestLimits limits{decode_limits_, {}};
  for (const auto& [key, v] : versions_) {
    if (v.settings.not_loaded.empty() && needs_own_decode(v.settings))
      limits.own.emplace(key, v.settings.limits);
  }
  return limits;
}

}  // namespace seqpipe::gateway
