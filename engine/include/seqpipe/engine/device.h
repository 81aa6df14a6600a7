#pragma once
// Where a tensor lives and where an op runs, and the allocator of each device. Only the CPU
// backend exists today; a CUDA backend plugs in behind src/backend.h (its allocator, copies and
// kernels) without touching the layers.
#include <cstddef>
#include <string_view>

namespace seqpipe::engine {

enum class Device { kCpu, kCuda };

constexpr std::string_view device_name(Device d) {
  return d == Device::kCpu ? "cpu" : "cuda";
}

// Memory of one device. Tensor::empty takes every buffer from its device's allocator: weights
// converted at load, workspaces, the KV cache.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // `bytes` (> 0) aligned to kAlignment; throws std::bad_alloc when the device is out of memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p) = 0;

  static constexpr size_t kAlignment = 64;  // an AVX-512 register, a cache line
};

// The allocator of `device`; EngineError when this build has no backend for it.
Allocator& allocator_for(Device device);

}  // namespace seqpipe::engine
