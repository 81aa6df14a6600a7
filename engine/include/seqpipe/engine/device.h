#pragma once
// Where a tensor lives and where an op runs, and the allocator of each device. The CPU backend
// is always built; the CUDA backend (src/cuda/) where the build found the CUDA toolkit. Both sit
// behind src/backend.h (allocator, copies, kernels) without touching the layers.
#include <cstddef>
#include <string>
#include <string_view>

namespace seqpipe::engine {

enum class Device { kCpu, kCuda };

constexpr std::string_view device_name(Device d) {
  return d == Device::kCpu ? "cpu" : "cuda";
}

// A device as a user names it: "cpu", "cuda" (the first GPU) or "cuda:N".
struct DeviceSpec {
  Device device = Device::kCpu;
  int index = 0;  // the GPU's ordinal for kCuda; 0 for the CPU
};

// EngineError naming the accepted forms for anything else.
DeviceSpec parse_device(std::string_view text);
// "cpu", "cuda:N".
std::string device_string(const DeviceSpec& spec);

// Makes `spec` usable (the CPU always is; a GPU is opened once per process, and a process uses
// one GPU). EngineError naming the device when this build or this machine cannot run it.
void open_device(const DeviceSpec& spec);

// Returns when every op queued on `device` has finished (the CPU's finish before they return):
// for timing a GPU's work from the host.
void synchronize(Device device);

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

// The allocator of `device`; EngineError when this build has no backend for it, or (CUDA) when
// no GPU was opened (open_device).
Allocator& allocator_for(Device device);

}  // namespace seqpipe::engine
