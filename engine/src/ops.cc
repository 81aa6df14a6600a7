// Op argument checks and device dispatch. A device without a backend in this build answers
// with an EngineError instead of failing to link.
#include "ops.h"

#include <string>

#include "cpu/kernels.h"
#include "seqpipe/engine/blas.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine::ops {

namespace {

[[noreturn]] void unsupported(Device device, const char* op) {
  throw EngineError(std::string("op ") + op + ": device '" + std::string(device_name(device)) +
                    "' has no backend in this build");
}

void require(bool ok, const char* op, const char* what) {
  if (!ok) throw EngineError(std::string("op ") + op + ": " + what);
}

}  // namespace

void linear(Device device, const float* x, int64_t m, const Tensor& w, float* y, float beta,
            profiler::Op tag) {
  profiler::ScopedOp timer(tag);
  require(w.rank() == 2, "linear", "weight must be 2-D [out, in]");
  if (m == 0) return;
  if (device != Device::kCpu) unsupported(device, "linear");
  const int64_t n = w.dim(0), k = w.dim(1);
  if (m > 1 && m <= cpu::kTiledMaxRows) {
    cpu::linear_tiled(x, m, w.data(), n, k, beta, y);
  } else {
    blas::gemm(true, m, n, k, 1.0f, x, k, w.data(), k, beta, y, n);
  }
}

void set_num_threads(int threads) {
  blas::set_num_threads(threads);
  cpu::set_num_threads(threads);
}

int max_threads() {
  return cpu::max_threads();
}

void rms_norm(Device device, const float* x, int64_t m, const Tensor& w, float eps, float scale,
              float* y) {
  profiler::ScopedOp timer(profiler::Op::kRmsNorm);
  require(w.rank() == 1, "rms_norm", "weight must be 1-D");
  if (device != Device::kCpu) unsupported(device, "rms_norm");
  cpu::rms_norm(x, m, w.dim(0), w.data(), eps, scale, y);
}

void embedding(Device device, const int* ids, int64_t n, const Tensor& table, float* out) {
  profiler::ScopedOp timer(profiler::Op::kEmbedding);
  require(table.rank() == 2, "embedding", "table must be 2-D [vocab, d]");
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= table.dim(0)) {
      throw EngineError("token id " + std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                        std::to_string(table.dim(0)) + ")");
    }
  }
  if (device != Device::kCpu) unsupported(device, "embedding");
  cpu::embedding(ids, n, table.data(), table.dim(1), out);
}

void relu(Device device, float* x, int64_t n) {
  profiler::ScopedOp timer(profiler::Op::kActivation);
  if (device != Device::kCpu) unsupported(device, "relu");
  cpu::relu(x, n);
}

void gated_gelu(Device device, float* a, const float* b, int64_t n) {
  profiler::ScopedOp timer(profiler::Op::kActivation);
  if (device != Device::kCpu) unsupported(device, "gated_gelu");
  cpu::gated_gelu(a, b, n);
}

void attention(Device device, const AttentionArgs& args) {
  profiler::ScopedOp timer(profiler::Op::kAttention);
  for (int64_t s = 0; s < args.num_seqs; ++s) {
    require(args.seqs[s].k_rows <= args.scratch_size, "attention",
            "scratch smaller than the key count");
    require(args.seqs[s].k_rows > 0, "attention", "a sequence has no keys");
  }
  if (device != Device::kCpu) unsupported(device, "attention");
  cpu::attention(args);
}

}  // namespace seqpipe::engine::ops
