#include "write_config.h"

#include <yaml-cpp/yaml.h>

#include <stdexcept>

namespace seqpipe::bench {

namespace {

// A value as `--set` gives it: a flow sequence or scalar in YAML; text YAML cannot read (a path
// with ": " in it) stays the text it is.
YAML::Node value_node(const std::string& text) {
  try {
    YAML::Node node = YAML::Load(text);
    if (node.IsScalar() || node.IsSequence()) return node;
  } catch (const YAML::Exception&) {
  }
  return YAML::Node(text);
}

}  // namespace

std::string config_file_text(const std::string& base_yaml,
                             const std::vector<std::string>& assignments,
                             const std::vector<std::string>& header) {
  YAML::Node root = base_yaml.empty() ? YAML::Node(YAML::NodeType::Map) : YAML::Load(base_yaml);
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw std::runtime_error("the base config is not a YAML map");
  for (const std::string& assignment : assignments) {
    const auto eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::runtime_error("expected key=value, got '" + assignment + "'");
    const std::string path = assignment.substr(0, eq);
    const YAML::Node value = value_node(assignment.substr(eq + 1));
    const auto dot = path.find('.');
    if (dot == std::string::npos) {
      root[path] = value;  // a top-level key (runtime_dir)
    } else {
      root[path.substr(0, dot)][path.substr(dot + 1)] = value;
    }
  }
  std::string text;
  for (const std::string& line : header) text += "# " + line + "\n";
  YAML::Emitter out;
  out << root;
  return text + out.c_str() + "\n";
}

}  // namespace seqpipe::bench
