// Op argument checks and device dispatch. A device without a backend in this build answers
// with an EngineError instead of failing to link.
#include "ops.h"

#include <string>

#include "cpu/kernels.h"
#include "cpu/onednn.h"
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

void linear(Device device, const float* x, int64_t m, const LinearWeight& w, float* y, float beta,
            profiler::Op tag) {
  profiler::ScopedOp timer(tag);
  require(w.defined(), "linear", "weight is empty");
  if (m == 0) return;
  if (device != Device::kCpu) unsupported(device, "linear");
  const int64_t n = w.out, k = w.in;
  if (w.packed) {
    cpu::linear_packed(x, m, *w.packed, w.scales.data(), beta, y);
  } else if (w.dtype == DataType::kBF16) {
    cpu::linear_bf16(x, m, w.weight.data_as<uint16_t>(), n, k, beta, y);
  } else if (w.dtype == DataType::kI8) {
    cpu::linear_int8(x, m, w.weight.data_as<int8_t>(), w.scales.data(), n, k, beta, y);
  } else if (m > 1 && m <= cpu::kTiledMaxRows) {
    cpu::linear_tiled(x, m, w.weight.data(), n, k, beta, y);
  } else {
    blas::gemm(true, m, n, k, 1.0f, x, k, w.weight.data(), k, beta, y, n);
  }
}

LinearWeight prepare_linear(Device device, const Tensor& w, ComputeType type, CpuKernels kernels) {
  require(w.rank() == 2 && w.dtype() == DataType::kF32, "prepare_linear",
          "weight must be fp32 [out, in]");
  if (device != Device::kCpu) unsupported(device, "prepare_linear");
  LinearWeight lw;
  lw.out = w.dim(0);
  lw.in = w.dim(1);
  switch (type) {
    case ComputeType::kFloat32:
      lw.weight = w;
      return lw;
    case ComputeType::kBFloat16:
      lw.dtype = DataType::kBF16;
      if (kernels == CpuKernels::kBest && cpu::onednn_runs(lw.dtype)) {
        lw.packed = cpu::pack_weight(w, lw.dtype);
      } else {
        lw.weight = Tensor::empty(w.shape(), device, DataType::kBF16);
        cpu::to_bf16(w.data(), w.numel(), lw.weight.data_as<uint16_t>());
      }
      return lw;
    case ComputeType::kInt8:
    case ComputeType::kInt8BFloat16:
      lw.dtype = DataType::kI8;
      lw.weight = Tensor::empty(w.shape(), device, DataType::kI8);
      lw.scales = Tensor::empty({lw.out}, device);
      cpu::quantize_rows(w.data(), lw.out, lw.in, lw.weight.data_as<int8_t>(), lw.scales.data());
      if (kernels == CpuKernels::kBest && cpu::onednn_runs(lw.dtype)) {
        lw.packed = cpu::pack_weight(lw.weight, lw.dtype);
        lw.weight = Tensor();  // only the packed copy is kept
      }
      return lw;
    case ComputeType::kAuto:
    case ComputeType::kFloat16:
      break;
  }
  throw EngineError("prepare_linear: compute type " + std::string(compute_type_name(type)) +
                    " is not a resolved CPU type");
}

ComputeType best_compute_type(Device device) {
  if (device != Device::kCpu) unsupported(device, "best_compute_type");
  if (cpu::onednn_runs(DataType::kI8)) return ComputeType::kInt8;
  if (cpu::onednn_runs(DataType::kBF16)) return ComputeType::kBFloat16;
  return ComputeType::kFloat32;
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
