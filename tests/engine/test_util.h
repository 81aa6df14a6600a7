#pragma once
// Helpers shared by the engine tests.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace seqpipe::engine::test {

inline std::string data_dir() {
  return SEQPIPE_TEST_DATA_DIR;
}

inline nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The tolerance the reference outputs are matched with: 1e-4 relative to the value, or to
// `scale` for values near zero (a sum that cancels is only as exact as its terms).
inline bool close(double got, double want, double scale = 1.0) {
  return std::abs(got - want) <= 1e-4 * std::max(std::abs(want), scale);
}

}  // namespace seqpipe::engine::test
