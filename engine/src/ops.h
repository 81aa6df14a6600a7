#pragma once
// The engine's ops: what the layers call. Each op checks its arguments and dispatches on the
// device to a kernel (src/cpu/ today; src/cuda/ when that backend is built). No device #ifdefs
// here or in the layers. Activations are passed as row pointers (row-major, contiguous rows of
// the stated width) so layers can work on slices of their workspaces without copies.
#include <cstdint>

#include "seqpipe/engine/device.h"
#include "seqpipe/engine/model.h"
#include "seqpipe/engine/profiler.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine::ops {

// Threads every backend may use for one op (the BLAS and the engine's own kernels).
void set_num_threads(int threads);
// The most threads an op may use (sizes per-thread scratch buffers).
int max_threads();

// y[m, n] = x[m, k] * w[n, k]^T + beta * y, n = w.out. beta = 1 fuses a residual add. The
// weight's type and layout pick the kernel.
void linear(Device device, const float* x, int64_t m, const LinearWeight& w, float* y,
            float beta = 0.0f, profiler::Op tag = profiler::Op::kLinear);

// The weight of a linear layer in `type` (float32, bfloat16, int8 or int8_bfloat16: resolved,
// see compute_type.h) for `device`, from the fp32 [out, in] tensor w: float32 uses w in place;
// the others convert it (once, at load), packed for oneDNN where it runs the type.
LinearWeight prepare_linear(Device device, const Tensor& w, ComputeType type, CpuKernels kernels);

// The compute type `auto` stands for on this machine.
ComputeType best_compute_type(Device device);

// y = x / sqrt(mean(x^2) + eps) * w * scale, per row of width w.dim(0) (T5LayerNorm).
void rms_norm(Device device, const float* x, int64_t m, const Tensor& w, float eps, float scale,
              float* y);

// out[i] = table[ids[i]]
void embedding(Device device, const int* ids, int64_t n, const Tensor& table, float* out);

void relu(Device device, float* x, int64_t n);
// a = gelu_tanh(a) * b (the gated-gelu FFN of T5 v1.1)
void gated_gelu(Device device, float* a, const float* b, int64_t n);

// One sequence's part of an attention call: q_rows queries at positions q_pos.. attend to
// k_rows keys/values (causal: key j only when j <= query position).
struct AttentionSequence {
  const float* q = nullptr;
  int64_t q_rows = 0;
  int64_t q_pos = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t k_rows = 0;
  float* out = nullptr;
};

struct AttentionArgs {
  const AttentionSequence* seqs = nullptr;
  int64_t num_seqs = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t q_stride = 0, kv_stride = 0, out_stride = 0;  // row strides in floats
  const PositionBias* bias = nullptr;                   // null: no position bias (cross-attention)
  bool causal = false;
  float* scratch =
      nullptr;  // max_threads() rows of scratch_size floats, scratch_size >= max k_rows
  int64_t scratch_size = 0;
};

// softmax(q k^T + bias) v per head, without T5's (absent) 1/sqrt(d) scaling.
void attention(Device device, const AttentionArgs& args);

}  // namespace seqpipe::engine::ops
