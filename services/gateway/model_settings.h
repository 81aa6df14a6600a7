#pragma once
// What the gateway applies per model version: the settings of the model that the gateway, not a
// worker, acts on (the protocol's token and beam caps, gateway.split_words, whether streams are
// refused). Each version's come from its own config, loaded as its replicas load it (its
// seqpipe.yaml under the pipeline's config file and --set: config::load_model_version_config),
// so a repository serving the speller beside another model applies each one's to its own
// requests. Kept on the gateway's loop thread, rebuilt when the catalog changes.
#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include "gateway/shared_catalog.h"
#include "seqpipe/config/config.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::gateway {

// The protocol limits this gateway enforces, from the config (docs/PROTOCOL.md, "Limits").
protocol::Limits protocol_limits(const config::PipelineConfig& config);

struct ModelSettings {
  protocol::Limits limits;  // protocol_limits of the version's config
  size_t split_words = 0;   // gateway.split_words (0: texts are not split)
  // Why the version's config does not load at the gateway; empty: it loads. Its replicas refuse
  // the same config, so its requests are answered `unavailable` at once.
  std::string not_loaded;
};
ModelSettings model_settings(const config::PipelineConfig& config);

// The settings of every model version in the catalog, by its key (config::ModelCatalog::key_of).
class ModelSettingsTable {
 public:
  // The config a version is served with; throws (config::ConfigError) when it does not load.
  using VersionConfig = std::function<config::PipelineConfig(const config::ModelVersion&)>;
  // `pipeline`: the gateway's own config, whose settings the one model of a pipeline without a
  // repository takes, and every version when `version_config` is empty (a config built in code,
  // with no layers to load a version's over).
  ModelSettingsTable(const config::PipelineConfig& pipeline, VersionConfig version_config);

  // The settings of `catalog`'s versions: a version seen before (same key and directory) keeps
  // its own; a new one is loaded (a failure is logged and kept in `not_loaded`, and the load
  // tried again with the next catalog).
  void update(const config::ModelCatalog& catalog);
  // The version's settings; the gateway's own for a key not in the catalog.
  const ModelSettings& of(const std::string& key) const;
  // What a request is decoded under before its model is known: the gateway's limits with the
  // largest token and beam caps of the versions; a request for a version with smaller caps is
  // decoded again under its own (needs_own_decode).
  const protocol::Limits& decode_limits() const { return decode_limits_; }
  bool needs_own_decode(const ModelSettings& settings) const;
  // The same, for the front doors' validators (SharedCatalog).
  RequestLimits request_limits() const;

 private:
  struct Version {
    std::string dir;
    ModelSettings settings;
  };
  // The settings of version `m` (`key`), or why its config does not load.
  Version load_version(const config::ModelVersion& m, const std::string& key) const;

  ModelSettings pipeline_;
  VersionConfig version_config_;
  std::map<std::string, Version> versions_;
  protocol::Limits decode_limits_;
};

}  // namespace seqpipe::gateway
