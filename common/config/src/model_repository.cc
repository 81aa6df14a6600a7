#include "seqpipe/config/model_repository.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <tuple>

#include "seqpipe/config/config.h"
#include "seqpipe/generation/model_files.h"

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

// What a link out of the repository is answered with: nothing of where it points, or of what
// reading there said, is shown (the index is served over HTTP).
constexpr const char* kOutside = "refused: a symbolic link out of the repository";

// Whether `path`, its links followed, stays inside `root` (canonical).
bool inside(const fs::path& root, const fs::path& path) {
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(path, ec);
  if (ec) return false;
  const fs::path relative = real.lexically_relative(root);
  return !relative.empty() && *relative.begin() != "..";
}

// Why `dir` cannot be served as a model version; empty when it can.
std::string missing_files(const fs::path& root, const fs::path& dir) {
  std::string missing;
  for (const char* file : kModelFiles) {
    if (!inside(root, dir / file)) return std::string(file) + ": " + kOutside;
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

// The bytes of `path` from `offset` on, up to `n` (fewer at its end).
std::string read_at(std::ifstream& in, uint64_t offset, uint64_t n) {
  std::string bytes(n, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(bytes.data(), static_cast<std::streamsize>(n));
  bytes.resize(in ? n : static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return bytes;
}

// Why the weights file is not whole yet (a copy in progress or stalled); empty when it is: its
// header is whole and its tensors' data ends exactly at the file's end (the format leaves no gap
// there). The engine checks the rest when it loads it.
std::string incomplete_weights(const fs::path& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) return "model.safetensors cannot be read";
  const std::string length = read_at(in, 0, 8);
  uint64_t header_len = 0;
  for (size_t i = length.size(); i-- > 0;) header_len = header_len << 8 | uint8_t(length[i]);
  if (length.size() < 8 || header_len > generation::kMaxSafetensorsHeaderBytes ||
      header_len > size - 8)
    return "model.safetensors is incomplete (" + std::to_string(size) + " bytes, no whole header)";
  uint64_t end = 0;
  try {
    const auto header = nlohmann::json::parse(read_at(in, 8, header_len));
    for (const auto& [name, entry] : header.items())
      if (name != "__metadata__")
        end = std::max(end, entry.at("data_offsets").at(1).get<uint64_t>());
  } catch (const std::exception&) {
    return "model.safetensors is incomplete (its header does not parse)";
  }
  if (end == size - 8 - header_len) return "";
  return "model.safetensors is incomplete (" + std::to_string(size) + " bytes, its header says " +
         std::to_string(8 + header_len + end) + ")";
}

void add_version(ModelRepository& repo, const fs::path& root, const std::string& name, int version,
                 const fs::path& dir) {
  if (!inside(root, dir)) {
    repo.bad.push_back({dir.string(), kOutside});
    return;
  }
  std::string why = missing_files(root, dir);
  if (why.empty()) why = incomplete_weights(dir / "model.safetensors");
  if (!why.empty()) {
    repo.bad.push_back({dir.string(), why});
    return;
  }
  repo.models.push_back({name, version, dir.string()});
}

void scan_model(ModelRepository& repo, const fs::path& root, const fs::path& model_dir) {
  const std::string name = model_dir.filename().string();
  std::error_code ec;
  if (!valid_model_name(name)) {
    repo.bad.push_back({model_dir.string(), "not a model name (1 to 128 of A-Z a-z 0-9 _ . -)"});
    return;
  }
  if (!inside(root, model_dir)) {
    repo.bad.push_back({model_dir.string(), kOutside});
    return;
  }
  if (fs::exists(model_dir / "config.json", ec)) {  // the flat layout: version 1
    add_version(repo, root, name, 1, model_dir);
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
  for (const auto& [version, dir] : versions) add_version(repo, root, name, version, dir);
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

std::function<PipelineConfig(const ModelVersion&)> version_config_loader(
    const LoadedConfig& pipeline) {
  return [&pipeline](const ModelVersion& m) { return load_model_version_config(pipeline, m); };
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
  // Links inside the repository are followed; links out of it are refused (kOutside).
  const fs::path root = fs::canonical(dir, ec);
  for (const fs::path& child : children) {
    if (fs::is_directory(child, ec)) scan_model(repo, root, child);
  }
  std::sort(repo.bad.begin(), repo.bad.end(),
            [](const BadEntry& a, const BadEntry& b) { return a.path < b.path; });
  return repo;
}

}  // namespace seqpipe::config
