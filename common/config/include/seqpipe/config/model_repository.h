#pragma once
// A model repository on disk, as Triton's: `<repository>/<name>/<version>/`, each version an
// HF T5 directory (config.json, model.safetensors, spiece.model) with its optional seqpipe.yaml
// (model_overrides). A model directory directly under the repository (today's flat layout,
// config.json in it) is that model's version 1. Scanning loads nothing (it reads model.safetensors'
// header: a version whose weights are not whole yet is a bad entry); an entry that cannot be
// served is listed with its path and why, and the others stay usable.
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "seqpipe/config/model_config.h"
#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::config {

struct ModelVersion {
  std::string name;
  int version = 1;
  std::string dir;  // the HF model directory of this version
  bool operator==(const ModelVersion&) const = default;
};

struct BadEntry {
  std::string path;
  std::string reason;
  bool operator==(const BadEntry&) const = default;
};

struct ModelRepository {
  std::vector<ModelVersion> models;  // by name, then version
  std::vector<BadEntry> bad;         // by path
};

// The files a model version's directory must hold.
inline constexpr const char* kModelFiles[] = {"config.json", "model.safetensors", "spiece.model"};

// Scans `dir`. A missing or unreadable `dir` is one bad entry.
// A symbolic link inside it (a model, a version or a model file) is followed only where it stays
// in the repository; one pointing out of it is a bad entry, "refused: a symbolic link out of the
// repository", which says nothing of its target.
ModelRepository scan_repository(const std::string& dir);

// The versions a pipeline serves from the start (model.repository_versions, as Triton's
// version_policy latest: N): each name's `newest` highest versions of `models` (by name, then
// version); 0: all. Others load on request (`seqpipe models load`).
std::vector<ModelVersion> newest_versions(const std::vector<ModelVersion>& models, int newest);

// The --set assignments that make the pipeline's config a model version's: its model.dir,
// model.name and model.version. `seqpipe up` gives them to the version's replicas, after the
// pipeline's own --set, so the version's seqpipe.yaml goes under the pipeline's config file and
// --set (load_pipeline_config's layers).
std::vector<std::string> model_version_overrides(const ModelVersion& model);
// The config model version `model` is served with, as its replicas load it: the layers of
// `pipeline` (its file and --set) with model_version_overrides(model) last. The gateway applies
// the version's own per-model settings (gateway.split_words, the token and beam caps) from it.
// Throws ConfigError (a seqpipe.yaml of the version that does not load, say).
PipelineConfig load_model_version_config(const LoadedConfig& pipeline, const ModelVersion& model);
// load_model_version_config over `pipeline`, which must outlive the function returned.
std::function<PipelineConfig(const ModelVersion&)> version_config_loader(
    const LoadedConfig& pipeline);

// Whether `name` may name a model: 1..protocol::kMaxModelNameBytes of [A-Za-z0-9_.-], not starting
// with '.'.
bool valid_model_name(const std::string& name);

// How a model version is named inside the pipeline (replicas' announcements, items): "name/v".
// A pipeline without a repository serves one model under its name (model.name, or model.dir's
// last component).
std::string model_key(const std::string& name, int version);

// The name a pipeline without a repository serves its model as: model.name, else model.dir's
// last component.
std::string served_model_name(const ModelConfig& model);
// What a replica announces and what its items carry: model_key(served_model_name, version) with
// a repository; "" without one (the pipeline's one model: every replica serves it, whatever its
// directory is called on its machine).
std::string served_model_key(const ModelConfig& model);

// The model versions a gateway serves and how a request's `model` / `version` resolve to one.
class ModelCatalog {
 public:
  // From a repository's scan (its good entries). The default model: `preferred` when it is one of
  // them, else the first name. `single`: the one model of a pipeline without a repository, whose
  // key is "" (served_model_key).
  ModelCatalog(const std::vector<ModelVersion>& models, const std::string& preferred,
               bool single = false);
  static ModelCatalog of(const PipelineConfig& config);

  // The key ("name/version") of the version that runs a request naming `name` (absent: the
  // default model) and `version` (absent: that name's highest); `not_found` for one not served.
  std::variant<std::string, protocol::Error> resolve(const std::optional<std::string>& name,
                                                     const std::optional<uint32_t>& version) const;
  // The version itself that resolve() names by its key, or the same `not_found`.
  std::variant<ModelVersion, protocol::Error> find(const std::optional<std::string>& name,
                                                   const std::optional<uint32_t>& version) const;
  // The key a version found here goes by: "" for the one model of a pipeline without a repository.
  std::string key_of(const ModelVersion& model) const;
  const std::vector<ModelVersion>& models() const { return models_; }
  // The versions of `name` served, lowest first (none for a name not served).
  std::vector<int> versions(const std::string& name) const;
  // The one model of a pipeline without a repository.
  bool single() const { return single_; }
  const std::string& default_name() const { return default_name_; }
  // The default model's highest version: what an unnamed request runs.
  const std::string& default_key() const { return default_key_; }
  std::vector<std::string> names() const;
  // Whether `key` ("name/version") is one of the versions served.
  bool serves(const std::string& key) const;

 private:
  std::vector<ModelVersion> models_;  // by name, then version
  std::string default_name_, default_key_;
  bool single_ = false;
};

// Where `seqpipe up` answers the model control requests (`seqpipe models`, the gateway's KServe
// repository API): ipc://<runtime_dir>/control.sock, beside the pipeline's lock, so only this
// machine's user can reach it.
std::string control_endpoint(const PipelineConfig& config);

}  // namespace seqpipe::config
