#pragma once
// What a device provides to the ops: its allocator, copies, a stream to wait on, and a kernel per
// op. src/ops.cc checks every op's arguments (shapes, dtypes, one device for all operands) and
// then calls the operands' device's backend; a backend may assume its arguments were checked.
// The CPU's is src/cpu/backend.cc, CUDA's src/cuda/backend.cu (src/cuda/absent.cc in a build
// without the CUDA toolkit).
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
  // other on it or on the CPU. Returns when host memory on either side may be used.
  virtual void copy(const TensorView& dst, const TensorView& src) = 0;
  // Every pair's dst <- src, each within this device (ops::copy_all checked them).
  virtual void copy_all(std::span<const TensorCopy> pairs) = 0;
  // Returns when every op issued so far has finished (the CPU's ops finish before they return).
  virtual void synchronize() = 0;
  // Threads an op may use (0 < threads).
  virtual void set_num_threads(int threads) = 0;

  // options.compute_type is resolved (not auto); w is on the host.
  virtual LinearWeight prepare_linear(const Tensor& w, const ModelOptions& options) = 0;
  virtual ComputeType best_compute_type() = 0;
  virtual void linear(const TensorView& x, const LinearWeight& w, const TensorView& y,
                      float beta) = 0;
  // y = relu(x W^T) in y's type: f32, or w's half type where reads_half_inputs.
  virtual void linear_relu(const TensorView& x, const LinearWeight& w, const TensorView& y) = 0;
  virtual void rms_norm(const TensorView& x, const TensorView& w, float eps, float scale,
                        const TensorView& y) = 0;
  // ids: i32 on this device, each in [0, table rows) (ops::stage_ids checked them).
  virtual void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) = 0;
  virtual void relu(const TensorView& x) = 0;
  virtual void gated_gelu(const TensorView& a, const TensorView& b) = 0;
  // The fp32 workspace attention needs for up to max_keys keys per sequence.
  virtual Tensor attention_workspace(int64_t max_keys) = 0;
  virtual void attention(const ops::AttentionArgs& args) = 0;
  // ids[r] <- the first maximum of logits row r, never token banned[r] (-1: none); banned and
  // ids are host memory of logits.dim(0) entries.
  virtual void argmax(const TensorView& logits, const int* banned, int* ids) = 0;

  // One decoder step's ops, which a backend may record once and replay (CUDA's: a graph per
  // owner and key). The same owner and key promise the same ops on the same buffers; only the
  // attention jobs and the staged tokens, which pass through the backend, change. end_step(true)
  // issues the step; end_step(false) drops it (an op threw). Backends that do not record, and
  // the CPU's, issue each op as it comes.
  virtual void begin_step(const void* /*owner*/, int64_t /*key*/) {}
  virtual void end_step(bool /*completed*/) {}
  // The owner's buffers are going away: what was recorded on them must not run again.
  virtual void forget_steps(const void* /*owner*/) {}

  // --- Fused attention of a decoder step ---
  // ops::decode_attention: every sequence's q has one row (ops.cc checked).
  virtual void decode_attention(const ops::AttentionArgs& args) = 0;

  // --- GEMM inputs in half precision (ops::linear_input_type) ---
  // Whether linear takes x in its weight's half type (bf16 / fp16) and rms_norm and
  // feed_forward_activation write one; else every activation is f32.
  virtual bool reads_half_inputs() { return false; }
  // y <- relu(a) (b undefined) or gated_gelu(a, b), in y's type; y may be a when f32.
  virtual void feed_forward_activation(const TensorView& a, const TensorView& b,
                                       const TensorView& y) = 0;
  // --- The KV cache in half precision (ops::kv_cache_type) ---
  // Whether decode_attention reads and appends to a bf16 / fp16 cache; else caches are f32.
  virtual bool holds_half_kv_cache() { return false; }
  // y <- x (f32) in y's type: f32, or bf16 / fp16 where holds_half_kv_cache.
  virtual void convert(const TensorView& x, const TensorView& y) = 0;

  // ops::top_k_log_softmax; ids and logprobs are host memory of logits.dim(0) x k entries.
  virtual void top_k_log_softmax(const TensorView& logits, int k, int* ids, float* logprobs) = 0;
};

namespace cpu {
Backend& backend();
}

namespace cuda {
// The backend of GPU `index`, made on the first call. EngineError when this build has no CUDA
// backend, the machine has no such GPU, or this process already uses another GPU.
Backend& open(int index);
// The backend open() made, or null before it.
Backend* opened();
}  // namespace cuda

}  // namespace seqpipe::engine
