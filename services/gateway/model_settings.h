#pragma once
// What the gateway applies per model version: the settings of the model that the gateway, not a
// worker, acts on (model_control::VersionSettings: the protocol's token and beam caps,
// gateway.split_words). Each version's come from its own config, loaded as its replicas load it
// (its seqpipe.yaml under the pipeline's config file and --set:
// config::load_model_version_config), so a repository serving the speller beside another model
// applies each one's to its own requests. The versions served at start are loaded before the
// loop serves; every catalog after that comes from the supervisor with its versions' settings
// typed in it, so the loop never reads or parses a model's files (a 1 MB config.json stalled
// it for seconds). Kept on the gateway's loop thread, rebuilt when the catalog changes.
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gateway/shared_catalog.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/control/model_control.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::gateway {

using ModelSettings = model_control::VersionSettings;

// The settings of every model version in the catalog, by its key (config::ModelCatalog::key_of).
class ModelSettingsTable {
 public:
  using VersionConfig = model_control::VersionConfig;
  // `pipeline`: the gateway's own config, whose settings the one model of a pipeline without a
  // repository takes, and every version when `version_config` is empty (a config built in code,
  // with no layers to load a version's over).
  ModelSettingsTable(const config::PipelineConfig& pipeline, VersionConfig version_config);

  // The settings of `catalog`'s versions as the gateway starts, each loaded from its config with
  // `version_config` (a failure is logged and kept in `not_loaded`). Before the loop serves.
  void load(const config::ModelCatalog& catalog);
  // The supervisor's catalog: each version's settings as it sent them; no file is read.
  void set(const std::vector<model_control::CatalogEntry>& catalog);
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
  // The settings of version `m` (`key`), or why its config does not load.
  ModelSettings load_version(const config::ModelVersion& m, const std::string& key) const;
  // The loosest caps of the versions (decode_limits_), after versions_ changed.
  void update_decode_limits();

  ModelSettings pipeline_;
  VersionConfig version_config_;
  std::map<std::string, ModelSettings> versions_;  // by key; none for a single model
  protocol::Limits decode_limits_;
};

}  // namespace seqpipe::gateway
