#include "seqpipe/config/model_repository.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <system_error>
#include <tuple>

namespace seqpipe::config {

namespace fs = std::filesystem;

namespace {

// A version directory's name: a positive decimal number without leading zeros.
std::optional<int> parse_version(const std::string& name) {
  int value = 0;
  const char* end = name.data() + name.size();
  auto [ptr, ec] = std::from_chars(name.data(), end, value);
  if (ec != std::errc() || ptr != end || name.empty() || name[0] == '0' || value < 1 ||
      value > protocol::kMaxModelVersion)
    return std::nullopt;
  return value;
}

// Why `dir` cannot be served as a model version; empty when it can.
std::string missing_files(const fs::path& dir) {
  std::string missing;
  for (const char* file : kModelFiles) {
    std::error_code ec;
    if (!fs::is_regular_file(dir / file, ec))
      missing += (missing.empty() ? "" : ", ") + std::string(file);
  }
  return missing.empty() ? "" : "missing " + missing;
}

std::vector<fs::path> sorted_children(const fs::path& dir, std::error_code& ec) {
  std::vector<fs::path> children;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    children.push_back(it->path());
  std::sort(children.begin(), children.end());
  return children;
}

void add_version(ModelRepository& repo, const std::string& name, int version, const fs::path& dir) {
  if (std::string why = missing_files(dir); !why.empty()) {
    repo.bad.push_back({dir.string(), why});
    return;
  }
  repo.models.push_back({name, version, dir.string()});
}

void scan_model(ModelRepository& repo, const fs::path& model_dir) {
  const std::string name = model_dir.filename().string();
  std::error_code ec;
  if (!valid_model_name(name)) {
    repo.bad.push_back({model_dir.string(), "not a model name (1 to 128 of A-Z a-z 0-9 _ . -)"});
    return;
  }
  if (fs::exists(model_dir / "config.json", ec)) {  // the flat layout: version 1
    add_version(repo, name, 1, model_dir);
    return;
  }
  std::vector<std::pair<int, fs::path>> versions;
  for (const fs::path& child : sorted_children(model_dir, ec)) {
    if (!fs::is_directory(child, ec)) continue;  // a README or a model card beside the versions
    if (auto v = parse_version(child.filename().string())) {
      versions.emplace_back(*v, child);
    } else {
      repo.bad.push_back({child.string(), "not a version number (a positive integer)"});
    }
  }
  if (ec) {
    repo.bad.push_back({model_dir.string(), "cannot be read: " + ec.message()});
    return;
  }
  if (versions.empty()) {
    repo.bad.push_back(
        {model_dir.string(), "no version directory (<name>/1/...) and no config.json"});
    return;
  }
  std::sort(versions.begin(), versions.end());
  for (const auto& [version, dir] : versions) add_version(repo, name, version, dir);
}

}  // namespace

bool valid_model_name(const std::string& name) {
  if (name.empty() || name.size() > protocol::kMaxModelNameBytes || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

std::string model_key(const std::string& name, int version) {
  return name + "/" + std::to_string(version);
}

std::vector<std::string> model_version_overrides(const ModelVersion& model) {
  return {"model.dir=" + model.dir, "model.name=" + model.name,
          "model.version=" + std::to_string(model.version)};
}

PipelineConfig load_model_version_config(const LoadedConfig& pipeline, const ModelVersion& model) {
  std::vector<std::string> overrides = pipeline.overrides;
  for (std::string& set : model_version_overrides(model)) overrides.push_back(std::move(set));
  return load_pipeline_config(pipeline.path, overrides).config;
}

std::string served_model_name(const ModelConfig& model) {
  if (!model.name.empty()) return model.name;
  const fs::path dir = fs::path(model.dir).lexically_normal();
  const std::string last = dir.filename().string();
  return last.empty() ? dir.parent_path().filename().string() : last;  // "models/x/" -> "x"
}

std::string served_model_key(const ModelConfig& model) {
  if (model.repository.empty()) return "";
  return model_key(served_model_name(model), model.version);
}

ModelCatalog::ModelCatalog(const std::vector<ModelVersion>& models, const std::string& preferred,
                           bool single)
    : models_(models), single_(single) {
  std::sort(models_.begin(), models_.end(), [](const ModelVersion& a, const ModelVersion& b) {
    return std::tie(a.name, a.version) < std::tie(b.name, b.version);
  });
  if (models_.empty()) return;
  const bool known = std::any_of(models_.begin(), models_.end(),
                                 [&](const ModelVersion& m) { return m.name == preferred; });
  default_name_ = known ? preferred : models_.front().name;
  default_key_ = std::get<std::string>(resolve(default_name_, std::nullopt));
}

std::vector<ModelVersion> newest_versions(const std::vector<ModelVersion>& models, int newest) {
  if (newest <= 0) return models;
  std::vector<ModelVersion> kept;
  for (size_t i = 0; i < models.size(); ++i) {
    // Versions of the same name that follow this one, all higher.
    size_t higher = 0;
    for (size_t j = i + 1; j < models.size() && models[j].name == models[i].name; ++j) ++higher;
    if (higher < static_cast<size_t>(newest)) kept.push_back(models[i]);
  }
  return kept;
}

ModelCatalog ModelCatalog::of(const PipelineConfig& config) {
  if (config.model.repository.empty()) {
    return ModelCatalog({{served_model_name(config.model), config.model.version, config.model.dir}},
                        served_model_name(config.model), /*single=*/true);
  }
  return ModelCatalog(newest_versions(scan_repository(config.model.repository).models,
                                      config.model.repository_versions),
                      config.model.name);
}

std::variant<std::string, protocol::Error> ModelCatalog::resolve(
    const std::optional<std::string>& name, const std::optional<uint32_t>& version) const {
  auto found = find(name, version);
  if (auto* error = std::get_if<protocol::Error>(&found)) return std::move(*error);
  return key_of(std::get<ModelVersion>(found));
}

std::variant<ModelVersion, protocol::Error> ModelCatalog::find(
    const std::optional<std::string>& name, const std::optional<uint32_t>& version) const {
  const std::string& wanted = name ? *name : default_name_;
  const ModelVersion* found = nullptr;
  for (const ModelVersion& m : models_) {
    if (m.name != wanted) continue;
    if (version ? m.version == static_cast<int>(*version) : true) found = &m;  // the last: highest
  }
  if (found) return *found;
  std::string message = "model '" + wanted + "'";
  if (version) message += " version " + std::to_string(*version);
  message += " is not served here; the models: ";
  for (size_t i = 0; i < models_.size(); ++i)
    message += (i ? ", " : "") + model_key(models_[i].name, models_[i].version);
  if (models_.empty()) message += "none";
  return protocol::Error{protocol::ErrorCode::kNotFound, message};
}

std::string ModelCatalog::key_of(const ModelVersion& model) const {
  return single_ ? std::string() : model_key(model.name, model.version);
}

std::vector<int> ModelCatalog::versions(const std::string& name) const {
  std::vector<int> versions;
  for (const ModelVersion& m : models_)
    if (m.name == name) versions.push_back(m.version);
  return versions;
}

std::vector<std::string> ModelCatalog::names() const {
  std::vector<std::string> names;
  for (const ModelVersion& m : models_)
    if (names.empty() || names.back() != m.name) names.push_back(m.name);
  return names;
}

bool ModelCatalog::serves(const std::string& key) const {
  return std::any_of(models_.begin(), models_.end(),
                     [&](const ModelVersion& m) { return model_key(m.name, m.version) == key; });
}

ModelRepository scan_repository(const std::string& dir) {
  ModelRepository repo;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    repo.bad.push_back({dir, "not a directory"});
    return repo;
  }
  const std::vector<fs::path> children = sorted_children(dir, ec);
  if (ec) {
    repo.bad.push_back({dir, "cannot be read: " + ec.message()});
    return repo;
  }
  for (const fs::path& child : children) {
    if (fs::is_directory(child, ec)) scan_model(repo, child);
  }
  std::sort(repo.bad.begin(), repo.bad.end(),
            [](const BadEntry& a, const BadEntry& b) { return a.path < b.path; });
  return repo;
}

}  // namespace seqpipe::config
