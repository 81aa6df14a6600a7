#include "seqpipe/engine/profiler.h"

namespace seqpipe::engine::profiler {

namespace {
std::atomic<bool> g_enabled{false};
thread_local std::array<OpStats, kNumOps> t_stats{};
}  // namespace

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kEmbedding: return "embedding";
    case Op::kRmsNorm: return "rms_norm";
    case Op::kLinear: return "linear (GEMM)";
    case Op::kLmHead: return "lm_head (GEMM)";
    case Op::kAttention: return "attention";
    case Op::kActivation: return "activation";
    case Op::kCacheUpdate: return "kv_cache update";
    case Op::kSearch: return "search (softmax/top-k)";
    case Op::kCount: break;
  }
  return "?";
}

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
void reset() { t_stats = {}; }
std::array<OpStats, kNumOps> snapshot() { return t_stats; }
void record(Op op, uint64_t ns) {
  auto& s = t_stats[static_cast<size_t>(op)];
  s.nanoseconds += ns;
  s.calls += 1;
}

}  // namespace seqpipe::engine::profiler
