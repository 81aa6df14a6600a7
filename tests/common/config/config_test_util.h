#pragma once
// What the config tests (config*_test.cc) share: the shipped file's path, a file's text, and the
// error of loading a YAML text.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "seqpipe/config/config.h"

namespace seqpipe::config {

inline const std::string kSourceDir = SEQPIPE_SOURCE_DIR;
inline const std::string kShippedConfig = kSourceDir + "/config/pipeline.yaml";

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The ConfigError message of loading `yaml` as "test.yaml" with `overrides`, or "" if it loads.
inline std::string load_error(const std::string& yaml,
                              const std::vector<std::string>& overrides = {}) {
  try {
    load_config_text(yaml, "test.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace seqpipe::config
