#include "seqpipe/engine/profiler.h"

namespace seqpipe::engine::profiler {

namespace {
std::atomic<bool> g_enabled{false};
thread_local std::array<OpStats, kNumOps> t_stats{};
thread_local ScopedOp* t_current = nullptr;
thread_local std::vector<KernelStats> t_kernels;
}  // namespace

ScopedOp::ScopedOp(Op op) : op_(op), on_(enabled()) {
  if (!on_) return;
  parent_ = t_current;
  t_current = this;
  start_ = std::chrono::steady_clock::now();
}

ScopedOp::~ScopedOp() {
  if (!on_) return;
  const auto elapsed = std::chrono::steady_clock::now() - start_;
  const uint64_t ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  auto& s = t_stats[static_cast<size_t>(op_)];
  s.nanoseconds += ns > child_ns_ ? ns - child_ns_ : 0;
  s.calls += 1;
  if (parent_ != nullptr) parent_->child_ns_ += ns;
  t_current = parent_;
}

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kEmbedding:
      return "embedding";
    case Op::kRmsNorm:
      return "rms_norm";
    case Op::kLinear:
      return "linear (GEMM)";
    case Op::kLmHead:
      return "lm_head (GEMM)";
    case Op::kAttention:
      return "attention";
    case Op::kActivation:
      return "activation";
    case Op::kCacheUpdate:
      return "kv_cache update";
    case Op::kSearch:
      return "search (softmax/top-k)";
    case Op::kCount:
      break;
  }
  return "?";
}

void set_enabled(bool on) {
  g_enabled.store(on, std::memory_order_relaxed);
}
bool enabled() {
  return g_enabled.load(std::memory_order_relaxed);
}
void reset() {
  t_stats = {};
  t_kernels.clear();
}
std::array<OpStats, kNumOps> snapshot() {
  return t_stats;
}

}  // namespace seqpipe::engine::profiler

namespace seqpipe::engine::profiler {

std::vector<KernelStats> kernel_snapshot() {
  return t_kernels;
}

Op current_op() {
  return t_current != nullptr ? t_current->op() : Op::kCount;
}

void add_device_time(Op op, std::string_view kernel, uint64_t nanoseconds) {
  if (op != Op::kCount) t_stats[static_cast<size_t>(op)].device_nanoseconds += nanoseconds;
  // A handful of kernel names: a linear search beats a map, and allocates only on a new name.
  for (KernelStats& k : t_kernels) {
    if (k.name == kernel) {
      k.nanoseconds += nanoseconds;
      k.launches += 1;
      return;
    }
  }
  t_kernels.push_back({std::string(kernel), nanoseconds, 1});
}

}  // namespace seqpipe::engine::profiler
