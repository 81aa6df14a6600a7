#pragma once
// What a device provides to the ops: its allocator, copies, and a kernel per op. src/ops.cc
// checks every op's arguments (shapes, dtypes, one device for all operands) and then calls the
// operands' device's backend; a backend may assume its arguments were checked. The CPU's is
// src/cpu/backend.cc; a CUDA backend adds src/cuda/ and one line in backend_for (src/ops.cc).
#include <cstdint>

#include "ops.h"
#include "seqpipe/engine/device.h"
#include "seqpipe/engine/model.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Allocator& allocator() = 0;
  // dst <- src, same dtype and element count; one of the two is on this backend's device, the
  // other on it or on the CPU.
  virtual void copy(const TensorView& dst, const TensorView& src) = 0;
  // Threads an op may use (0 < threads).
  virtual void set_num_threads(int threads) = 0;

  virtual LinearWeight prepare_linear(const Tensor& w, ComputeType type, CpuKernels kernels) = 0;
  virtual ComputeType best_compute_type() = 0;
  virtual void linear(const TensorView& x, const LinearWeight& w, const TensorView& y,
                      float beta) = 0;
  virtual void rms_norm(const TensorView& x, const TensorView& w, float eps, float scale,
                        const TensorView& y) = 0;
  virtual void embedding(const int* ids, int64_t n, const TensorView& table,
                         const TensorView& out) = 0;
  virtual void relu(const TensorView& x) = 0;
  virtual void gated_gelu(const TensorView& a, const TensorView& b) = 0;
  // The fp32 workspace attention needs for up to max_keys keys per sequence.
  virtual Tensor attention_workspace(int64_t max_keys) = 0;
  virtual void attention(const ops::AttentionArgs& args) = 0;
};

namespace cpu {
Backend& backend();
}

}  // namespace seqpipe::engine
