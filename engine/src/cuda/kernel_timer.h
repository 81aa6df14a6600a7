#pragma once
// Device time per kernel for the profiler (engine_bench --profile), without Nsight: while the
// profiler is on, the backend issues every op as it comes (no graph: ops::RecordedStep records
// nothing then), and each launch it wraps in a KernelTimer::Scope is bracketed by two CUDA
// events on the stream. The pairs are read back after the stream is synchronized (ops.cc's
// OpTimer waits for the device after every op while profiling) and reported to
// profiler::add_device_time under the op that was being timed when the kernel was launched.
// Off, a Scope costs one relaxed atomic load.
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "cuda/memory.h"
#include "seqpipe/engine/profiler.h"

namespace seqpipe::engine::cuda {

class KernelTimer {
 public:
  KernelTimer() = default;
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;
  ~KernelTimer() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  // Times what is queued on `stream` while it lives; `name` is a literal (kept as a pointer).
  class Scope {
   public:
    Scope(KernelTimer& timer, const char* name, cudaStream_t stream, bool eager)
        : timer_(eager && profiler::enabled() ? &timer : nullptr), stream_(stream) {
      if (timer_ != nullptr) index_ = timer_->start(name, stream);
    }
    ~Scope() {
      if (timer_ != nullptr) cudaEventRecord(timer_->events_[index_ + 1], stream_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    KernelTimer* timer_;
    cudaStream_t stream_;
    size_t index_ = 0;
  };

  // After the stream was synchronized: every pending pair's time to the profiler.
  void collect() {
    for (const Pending& p : pending_) {
      float ms = 0.0f;
      check(cudaEventElapsedTime(&ms, events_[p.index], events_[p.index + 1]), "kernel timer");
      profiler::add_device_time(p.op, p.name, static_cast<uint64_t>(ms * 1e6));
    }
    pending_.clear();
  }

 private:
  struct Pending {
    const char* name;
    profiler::Op op;
    size_t index;  // of the start event; the end one follows it
  };

  size_t start(const char* name, cudaStream_t stream) {
    const size_t index = pending_.size() * 2;
    while (events_.size() < index + 2) {  // grows while profiling only; reused after
      cudaEvent_t e = nullptr;
      check(cudaEventCreate(&e), "kernel timer event");
      events_.push_back(e);
    }
    check(cudaEventRecord(events_[index], stream), "kernel timer");
    pending_.push_back({name, profiler::current_op(), index});
    return index;
  }

  std::vector<cudaEvent_t> events_;
  std::vector<Pending> pending_;
};

}  // namespace seqpipe::engine::cuda
