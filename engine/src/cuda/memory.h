#pragma once
// The CUDA backend's own memory (src/cuda/backend.cu): error checks, growable device scratch, the
// pinned upload ring of eager ops, the arena of recorded decoder steps, and the tensors' allocator.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <new>
#include <string>
#include <utility>

#include "seqpipe/engine/device.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine::cuda {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw EngineError(std::string("cuda: ") + what + ": " + cudaGetErrorString(status));
}

inline void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw EngineError(std::string("cublasLt: ") + what + ": status " +
                      std::to_string(static_cast<int>(status)));
  }
}

// Device memory the backend keeps for itself (not a Tensor: tensors need the backend opened).
// Grows, never shrinks: after the first calls of each size no op allocates.
class DeviceBuffer {
 public:
  ~DeviceBuffer() { cudaFree(data_); }
  void* reserve(size_t bytes) {
    if (bytes > bytes_) {
      check(cudaFree(data_), "cudaFree");  // waits for the device: no queued op still reads it
      data_ = nullptr;
      check(cudaMalloc(&data_, bytes), "cudaMalloc");
      bytes_ = bytes;
    }
    return data_;
  }
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Pinned host memory for the small per-call uploads (attention jobs, banned tokens) and the
// ids argmax returns. Uploads from it are asynchronous, so a chunk is written again only after
// the copy that last read it finished: kChunks uploads may be in flight before one waits.
class UploadRing {
 public:
  static constexpr int kChunks = 64;

  ~UploadRing() {
    for (Chunk& c : chunks_) {
      cudaFreeHost(c.data);
      if (c.done != nullptr) cudaEventDestroy(c.done);
    }
  }
  // A pinned chunk of at least `bytes` to fill now and upload() next.
  void* next(size_t bytes) {
    Chunk& c = chunks_[static_cast<size_t>(next_)];
    if (c.done == nullptr)
      check(cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming), "event");
    check(cudaEventSynchronize(c.done), "cudaEventSynchronize");
    if (bytes > c.bytes) {
      check(cudaFreeHost(c.data), "cudaFreeHost");
      c.data = nullptr;
      check(cudaHostAlloc(&c.data, bytes, cudaHostAllocDefault), "cudaHostAlloc");
      c.bytes = bytes;
    }
    return c.data;
  }
  // Queues the copy of the chunk next() gave into device memory `dst`.
  void upload(void* dst, size_t bytes, cudaStream_t stream) {
    Chunk& c = chunks_[static_cast<size_t>(next_)];
    check(cudaMemcpyAsync(dst, c.data, bytes, cudaMemcpyHostToDevice, stream), "upload");
    check(cudaEventRecord(c.done, stream), "cudaEventRecord");
    next_ = (next_ + 1) % kChunks;
  }

 private:
  struct Chunk {
    void* data = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
  };
  std::array<Chunk, kChunks> chunks_{};
  int next_ = 0;
};

// What a recorded decoder step uploads (attention jobs, staged tokens): pinned host memory and
// device memory of one fixed size, filled from the start at each step, so that the k-th upload of
// a step always copies between the same two addresses, the ones its graph's copy node was
// recorded with. Steps run one at a time (each waits for the last, end_step), so one arena serves.
class StepArena {
 public:
  static constexpr size_t kBytes = size_t{4} << 20;

  ~StepArena() {
    cudaFreeHost(host_);
    cudaFree(device_);
  }
  // Before a step (and before a recording, which may not allocate): from the start again.
  void rewind() {
    if (host_ == nullptr) {
      check(cudaHostAlloc(&host_, kBytes, cudaHostAllocDefault), "cudaHostAlloc");
      check(cudaMalloc(&device_, kBytes), "cudaMalloc");
    }
    used_ = 0;
  }
  // Room for `bytes`: where to write them on the host and where the copy puts them.
  std::pair<void*, void*> take(size_t bytes) {
    const size_t at = used_;
    used_ += (bytes + 255) / 256 * 256;
    if (used_ > kBytes) throw EngineError("a recorded decoder step uploads more than 4 MiB");
    return {static_cast<char*>(host_) + at, static_cast<char*>(device_) + at};
  }
  // What take() handed out since rewind(): bytes [0, used()) of host() and device().
  size_t used() const { return used_; }
  void* host() const { return host_; }
  void* device() const { return device_; }

 private:
  void* host_ = nullptr;
  void* device_ = nullptr;
  size_t used_ = 0;
};

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the error: the caller handles bad_alloc
      throw std::bad_alloc();
    }
    return p;  // cudaMalloc aligns to 256 bytes, past kAlignment
  }
  void deallocate(void* p) override { cudaFree(p); }
};

}  // namespace seqpipe::engine::cuda
