#pragma once
// Per-op time accounting for engine_bench --profile. Off by default; when off, a ScopedOp costs
// one relaxed atomic load. Counters are per thread (the engine runs a model on one thread).
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace seqpipe::engine::profiler {

enum class Op { kEmbedding, kRmsNorm, kLinear, kLmHead, kAttention, kActivation, kCacheUpdate, kSearch, kCount };
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
void record(Op op, uint64_t ns);

class ScopedOp {
 public:
  explicit ScopedOp(Op op) : op_(op), on_(enabled()) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  ~ScopedOp() {
    if (on_) {
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_);
      record(op_, static_cast<uint64_t>(ns.count()));
    }
  }
  ScopedOp(const ScopedOp&) = delete;
  ScopedOp& operator=(const ScopedOp&) = delete;

 private:
  Op op_;
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace seqpipe::engine::profiler
