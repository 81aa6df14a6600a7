#pragma once
// Per-op time accounting for engine_bench --profile. Off by default; when off, a ScopedOp costs
// one relaxed atomic load. Counters are per thread (the engine runs a model on one thread).
// Scopes nest: an op's time excludes the ops timed inside it, so the rows add up.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

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
  uint64_t nanoseconds = 0;
  uint64_t calls = 0;
};

void set_enabled(bool on);
bool enabled();
void reset();
std::array<OpStats, kNumOps> snapshot();  // this thread's counters

class ScopedOp {
 public:
  explicit ScopedOp(Op op);
  ~ScopedOp();
  ScopedOp(const ScopedOp&) = delete;
  ScopedOp& operator=(const ScopedOp&) = delete;

 private:
  Op op_;
  bool on_;
  ScopedOp* parent_ = nullptr;
  uint64_t child_ns_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace seqpipe::engine::profiler
