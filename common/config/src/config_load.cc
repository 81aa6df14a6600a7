// Reading a config: YAML text, then `--set` overrides, each value checked as it is assigned and
// its origin (file:line or the --set argument) remembered for the cross-field checks. Also the
// way back out: to_yaml and config_keys.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>

#include "config_check.h"
#include "config_schema.h"
#include "seqpipe/config/config.h"
#include "seqpipe/generation/model_files.h"

namespace seqpipe::config {
namespace {

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
  } else if constexpr (std::is_same_v<Member, bool>) {
    const std::string text = node.IsScalar() ? node.Scalar() : "";
    if (text == "true" || text == "false") {
      member = text == "true";
    } else {
      fail(where, path + " must be true or false, got " + describe(node));
    }
  } else {
    member = int_from_node<Member>(where, path, node, rule);
  }
}

std::string mark_text(const YAML::Mark& mark) {
  return mark.line >= 0 ? ":" + std::to_string(mark.line + 1) : "";
}

// `text` parsed. yaml-cpp takes milliseconds over a commented config file (1.5 ms for the 20 KB
// config/pipeline.yaml), and a file is loaded again and again: twice per load (below), and the
// gateway loads each model version's config over the same file in its serving loop when the
// catalog changes. So each thread keeps its last document and reuses it while the text is the
// same; loaders only read it. Per thread: yaml-cpp's nodes are not safe to share between threads.
YAML::Node parsed_document(const std::string& text) {
  thread_local std::string last_text;
  thread_local std::optional<YAML::Node> last;
  if (!last || text != last_text) {
    last.reset();  // emplaced, not assigned: assigning a YAML::Node merges the two documents
    last.emplace(YAML::Load(text));  // may throw: nothing kept
    last_text = text;
  }
  return *last;
}

class Loader {
 public:
  explicit Loader(std::string source) : source_(std::move(source)), origins_(source_) {}

  void load_document(const std::string& text) {
    const YAML::Node root = parsed(text);
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

  // `from` names where the assignment came from in messages; empty: "--set <assignment>".
  void apply_override(const std::string& assignment, const std::string& from = {}) {
    const std::string where = from.empty() ? "--set " + assignment : from;
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

  const PipelineConfig& config() const { return config_; }
  const Origins& origins() const { return origins_; }

  PipelineConfig finish() const {
    validate_with(config_, origins_);
    return config_;
  }

 private:
  YAML::Node parsed(const std::string& text) const {
    try {
      return parsed_document(text);
    } catch (const YAML::Exception& e) {
      fail(source_ + mark_text(e.mark) +
               (e.mark.column >= 0 ? ":" + std::to_string(e.mark.column + 1) : ""),
           "not valid YAML: " + e.msg);
    }
  }

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

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot read: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(path, std::string("cannot read: ") + std::strerror(errno));
  return text.str();
}

// A relative path of the model's file made relative to the model directory; each part of a
// ':'-separated list on its own.
std::string under_model_dir(const std::string& paths, const std::string& model_dir) {
  std::string joined;
  size_t start = 0;
  while (true) {
    const size_t colon = paths.find(':', start);
    const std::string part = paths.substr(start, colon - start);
    if (start > 0) joined += ':';
    joined += part.empty() || part.front() == '/'
                  ? part
                  : (std::filesystem::path(model_dir) / part).lexically_normal().string();
    if (colon == std::string::npos) return joined;
    start = colon + 1;
  }
}

// One loaded value as a --set value reads it back.
template <typename Member, typename Rule>
std::string assignment_value(const Member& member, const Rule& rule, const std::string& model_dir) {
  if constexpr (std::is_same_v<Member, std::string>) {
    if constexpr (std::is_same_v<Rule, TextRule>) {
      const bool path = rule.kind == TextKind::kPath || rule.kind == TextKind::kOptionalPath ||
                        rule.kind == TextKind::kPathList;
      if (path) return under_model_dir(member, model_dir);
    }
    return member;
  } else if constexpr (std::is_same_v<Member, bool>) {
    return member ? "true" : "false";
  } else if constexpr (std::is_same_v<Member, std::vector<int>> ||
                       std::is_same_v<Member, std::vector<std::string>>) {
    YAML::Emitter out;
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& v : member) out << v;
    out << YAML::EndSeq;
    return out.c_str();
  } else {
    return std::to_string(member);
  }
}

}  // namespace

std::string read_model_file(const std::string& path, unsigned long long cap) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot read: ") + std::strerror(errno));
  // At most one byte over the cap is read, whatever the file's size (it may grow meanwhile).
  std::string text(cap + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) fail(path, std::string("cannot read: ") + std::strerror(errno));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > cap)
    fail(path,
         "larger than " + std::to_string(cap) + " bytes; not a model's config (refused unparsed)");
  return text;
}

std::vector<std::string> model_overrides(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / kModelConfigName).string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return {};
  // Read as any config file (types, ranges, unknown keys, file:line), then turned back into
  // assignments so that the file, the config file and --set apply in one order.
  Loader loader(path);
  loader.load_document(read_model_file(path, generation::kMaxModelSettingsBytes));
  std::vector<std::string> sets;
  for_each_field(loader.config(), [&](Key key, const auto& member, const auto& rule) {
    const std::string name = key.path();
    if (!loader.origins().contains(name)) return;
    if (!key.per_model) {
      fail(loader.origins().of(name),
           name +
               " is not a setting of the model; set it in the pipeline config (--config or "
               "--set) instead");
    }
    sets.push_back(name + "=" + assignment_value(member, rule, model_dir));
  });
  return sets;
}

LoadedConfig load_layers(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = path.empty() ? std::string() : read_file(path);
  const std::string source = path.empty() ? "built-in defaults" : path;
  // The model directory is the file's and the overrides' to choose; its settings go under both.
  Loader probe(source);
  probe.load_document(text);
  for (const std::string& assignment : overrides) probe.apply_override(assignment);
  const std::string model_dir = probe.config().model.dir;
  const std::vector<std::string> model_sets = model_overrides(model_dir);
  const std::string model_path =
      model_sets.empty() ? std::string()
                         : (std::filesystem::path(model_dir) / kModelConfigName).string();

  Loader loader(source);
  for (const std::string& assignment : model_sets) {
    loader.apply_override(assignment, model_path + " (" + assignment + ")");
  }
  loader.load_document(text);
  for (const std::string& assignment : overrides) loader.apply_override(assignment);
  return {loader.finish(), path, model_path, overrides};
}

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

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for_each_field(PipelineConfig{},
                 [&](Key key, const auto&, const auto&) { keys.push_back(key.path()); });
  return keys;
}

std::vector<std::string> model_config_keys() {
  std::vector<std::string> keys;
  for_each_field(PipelineConfig{}, [&](Key key, const auto&, const auto&) {
    if (key.per_model) keys.push_back(key.path());
  });
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

}  // namespace seqpipe::config
