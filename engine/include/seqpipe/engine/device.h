#pragma once
// Where a tensor lives and where an op runs. Only the CPU backend exists today; a CUDA backend
// plugs in behind the op dispatch in src/ops.cc without touching the layers.
#include <string_view>

namespace seqpipe::engine {

enum class Device { kCpu, kCuda };

constexpr std::string_view device_name(Device d) {
  return d == Device::kCpu ? "cpu" : "cuda";
}

}  // namespace seqpipe::engine
