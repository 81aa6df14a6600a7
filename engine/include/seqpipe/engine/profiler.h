#pragma once
// Per-op time accounting for engine_bench --profile. Off by default; when off, a ScopedOp costs
// one relaxed atomic load. Counters are per thread (the engine runs a model on one thread).
// Scopes nest: an op's time excludes the ops timed inside it, so the rows add up.
// A GPU backend adds device time too: each kernel it launches while the profiler is on is timed
// on the device (CUDA events around it) and reported with add_device_time, under the op that
// launched it and under the kernel's own name (engine_bench --profile's per-kernel table).
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace seqpipe::engine::profiler {

enum class Op {
  kEmbedding,
  kRmsNorm,
  kLinear,
  kLmHead,
  kAttention,
  kActivation,
  kCacheUpdate,
  kSearch,
  kCount
};
constexpr size_t kNumOps = static_cast<size_t>(Op::kCount);

std::string_view op_name(Op op);

struct OpStats {
  uint64_t nanoseconds = 0;  // on the host, from the op's call to its return
  uint64_t calls = 0;
  uint64_t device_nanoseconds = 0;  // the op's kernels on the device (a GPU's; 0 on the CPU)
};

// One kernel's (or device copy's) total device time, by the name its backend gives it.
struct KernelStats {
  std::string name;
  uint64_t nanoseconds = 0;
  uint64_t launches = 0;
};

void set_enabled(bool on);
bool enabled();
void reset();
std::array<OpStats, kNumOps> snapshot();     // this thread's counters
std::vector<KernelStats> kernel_snapshot();  // this thread's kernels, in the order first seen

// The op timed now on this thread (Op::kCount: none), for a backend to charge its kernels to.
Op current_op();
// A backend's measurement of one kernel launched under `op` (on the thread that launched it).
void add_device_time(Op op, std::string_view kernel, uint64_t nanoseconds);

class ScopedOp {
 public:
  explicit ScopedOp(Op op);
  ~ScopedOp();
  ScopedOp(const ScopedOp&) = delete;
  ScopedOp& operator=(const ScopedOp&) = delete;
  Op op() const { return op_; }

 private:
  Op op_;
  bool on_;
  ScopedOp* parent_ = nullptr;
  uint64_t child_ns_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace seqpipe::engine::profiler
