#pragma once
// Helpers shared by the engine tests.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ops.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/model.h"

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

// n normally distributed values times `scale`, the same for the same seed.
inline std::vector<float> random_values(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng) * scale;
  return v;
}

// A host position-bias table [heads, 2 * max_distance + 1] of random_values(.., seed).
inline PositionBias random_bias(int64_t heads, int64_t max_distance, unsigned seed) {
  PositionBias bias;
  bias.max_distance = max_distance;
  bias.table = Tensor::empty({heads, 2 * max_distance + 1});
  const std::vector<float> table = random_values(static_cast<size_t>(bias.table.numel()), seed);
  std::copy(table.begin(), table.end(), bias.table.data());
  return bias;
}

// Why `device` cannot run here (this build or this machine has no such device), or nullopt.
inline std::optional<std::string> missing_device(Device device) {
  try {
    open_device({device, 0});
    return std::nullopt;
  } catch (const EngineError& e) {
    return std::string(e.what());
  }
}

// A device the model tests run on: the CPU; a GPU replaying each decoder step as a recorded CUDA
// graph (the default); a GPU issuing every op as it comes (ModelOptions::cuda_graphs false).
struct DeviceCase {
  Device device;
  bool cuda_graphs;
  const char* name;  // the test name's suffix
};
inline constexpr DeviceCase kDeviceCases[] = {{Device::kCpu, true, "Cpu"},
                                              {Device::kCuda, true, "Cuda"},
                                              {Device::kCuda, false, "CudaEager"}};
inline void PrintTo(const DeviceCase& device, std::ostream* os) {
  *os << device.name;
}

}  // namespace seqpipe::engine::test

// Skips the test, with the reason, where its device cannot run (a GPU test on a machine or a
// build without a GPU).
#define SEQPIPE_SKIP_WITHOUT(device) \
  if (const auto why = ::seqpipe::engine::test::missing_device(device); why) GTEST_SKIP() << *why
