#pragma once
// The engine's ops: what the layers call. Each op takes tensors or views, and src/ops.cc checks
// them in one place (shapes, dtypes, one device for every operand) before it calls that
// device's backend (src/backend.h: src/cpu/, src/cuda/). No device #ifdefs here or in the layers.
// Ops on a GPU are queued on its stream: they may return before they finish; copy_to into host
// memory and argmax wait for them.
// Activations are fp32 [rows, width] views, but where a GEMM reads one: that may be in the GEMM's
// half input type on a device whose GEMMs read half inputs (linear_input_type below: rms_norm's
// y, attention's out, the FFN's activation). Layers pass slices of their workspaces (rows())
// without copies.
#include <cstdint>
#include <span>

#include "seqpipe/engine/device.h"
#include "seqpipe/engine/model.h"
#include "seqpipe/engine/profiler.h"
#include "seqpipe/engine/tensor.h"
#include "seqpipe/generation/limits.h"

namespace seqpipe::engine {
class Backend;
}

namespace seqpipe::engine::ops {

// Threads every op on `device` may use (the CPU: the BLAS, oneDNN and the engine's kernels).
void set_num_threads(Device device, int threads);

// dst <- src: same dtype and element count, host <-> device or within one device.
void copy_to(const TensorView& dst, const TensorView& src);

// Every pair's copy, all on one device and within it. On a GPU one launch for them all, where a
// copy_to each would cost a launch each (a batch's cross-attention K/V into its slots, 2 x
// sequences x layers; a beam step's reordered caches).
void copy_all(std::span<const TensorCopy> pairs);

// y[m, n] = x[m, k] * W[n, k]^T + beta * y, n = w.out, k = w.in, on the weight's device.
// beta = 1 fuses a residual add. The weight's type and layout pick the kernel.
void linear(const TensorView& x, const LinearWeight& w, const TensorView& y, float beta = 0.0f,
            profiler::Op tag = profiler::Op::kLinear);

// y[m, n] = relu(x W^T): T5 v1.0's FFN input GEMM and its activation as one op, y f32 or
// linear_input_type(w) (the output GEMM's half input). On a GPU one GEMM with cuBLASLt's ReLU
// epilogue writing y in y's type (rounded to nearest; in fp16 a value past the type's range is
// inf, as HF's own fp16 wi GEMM makes it, not clamped as the activation kernel does); on the
// CPU linear, then relu.
void linear_relu(const TensorView& x, const LinearWeight& w, const TensorView& y);

// The weight of a linear layer in options.compute_type (resolved: float32, bfloat16, float16,
// int8 or int8_bfloat16, see compute_type.h) on options.device, from the fp32 [out, in] host
// tensor w: float32 on the CPU uses w in place; the rest convert it (once, at load), packed for
// a library where one runs the type.
LinearWeight prepare_linear(const Tensor& w, const ModelOptions& options);

// The compute type `auto` stands for on this machine.
ComputeType best_compute_type(Device device);

// y = x / sqrt(mean(x^2) + eps) * w * scale, per row of width w.dim(0) (T5LayerNorm); y is f32,
// or the linear_input_type of the linear layer that reads it.
void rms_norm(const TensorView& x, const TensorView& w, float eps, float scale,
              const TensorView& y);

// Token ids for embedding on `device`: ids[0, n) checked against the vocabulary here (the one
// place: a kernel cannot report a bad id), then used in place on the CPU, or copied into
// `staging` (an i32 tensor on the device, grown when too small) elsewhere.
TensorView stage_ids(const int* ids, int64_t n, int64_t vocab, Device device, Tensor& staging);

// out[i] = table[ids[i]]; ids: i32 [n] from stage_ids, on the table's device.
void embedding(const TensorView& ids, const TensorView& table, const TensorView& out);

void relu(const TensorView& x);
// a = gelu_tanh(a) * b (the gated-gelu FFN of T5 v1.1)
void gated_gelu(const TensorView& a, const TensorView& b);

// One sequence's part of an attention call: q's rows (queries at positions q_pos..) attend to
// k's rows (causal: key j only when j <= query position); q, k, v, out are [rows, heads * d].
// With new_k / new_v ([q's rows, heads * d]), they are first written to k's and v's rows q_pos..
// (a decoder step appending its keys and values to the KV cache, on the op's threads, just before
// they are read). out is f32, or the output projection's linear_input_type (every sequence's
// the same), so that the projection casts nothing.
// q, k and v may instead be the column thirds of one Q/K/V GEMM's output rows (row_stride:
// fused_qkv_sequence), read in place with that stride: attention() only, without new_k / new_v.
struct AttentionSequence {
  TensorView q;
  int64_t q_pos = 0;
  TensorView k, v;
  TensorView out;
  TensorView new_k = {}, new_v = {};
  int64_t row_stride = 0;  // elements from a row of q, k or v to the next; 0: their width

  int64_t q_row_stride() const { return row_stride > 0 ? row_stride : q.row_size(); }
  int64_t kv_row_stride() const { return row_stride > 0 ? row_stride : k.row_size(); }
};

// A sequence's self-attention over rows of one fused projection, qkv ([rows, 3 * width], q's
// columns, then k's, then v's: x times AttentionWeights::qkv), into out ([rows, width]): q, k
// and v are views of qkv's thirds with row stride 3 * width, so no copy splits them.
AttentionSequence fused_qkv_sequence(const TensorView& qkv, const TensorView& out);

struct AttentionArgs {
  const AttentionSequence* seqs = nullptr;
  int64_t num_seqs = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  const PositionBias* bias = nullptr;  // null: no position bias (cross-attention)
  bool causal = false;
  TensorView workspace;  // attention_workspace(device, max_keys), max_keys >= every k's rows
};

// The workspace attention needs on `device` for sequences of up to max_keys keys.
Tensor attention_workspace(Device device, int64_t max_keys);

// softmax(q k^T + bias) v per head, without T5's (absent) 1/sqrt(d) scaling.
void attention(const AttentionArgs& args);

// Greedy decoding's choice on the logits' device, so that only the ids cross to the host:
// ids[r] <- the first maximum of logits row r (torch.argmax's tie rule), never token banned[r]
// (-1: none; min_new_tokens bans eos). banned and ids are host memory of logits.dim(0) entries.
void argmax(const TensorView& logits, const int* banned, int* ids);

// The ops issued while one lives form one decoder step that the device may record and replay
// (Backend::begin_step); finish() issues it. Not with record false (ModelOptions::cuda_graphs),
// nor while the profiler times each op, which waits on the device after every op.
class RecordedStep {
 public:
  RecordedStep(Device device, bool record, const void* owner, int64_t key);
  ~RecordedStep();  // unfinished (an op threw): the step is dropped
  RecordedStep(const RecordedStep&) = delete;
  RecordedStep& operator=(const RecordedStep&) = delete;
  void finish();

 private:
  Backend* backend_ = nullptr;
};
void forget_recorded_steps(Device device, const void* owner);

// --- Fused attention of a decoder step ---

// The type the decoder's KV cache (self and cross K/V) holds on `device` for a model of
// `compute` type: the compute type's bf16 / fp16 on a backend whose decode_attention reads a
// half cache (CUDA), halving the cache's memory and the bytes a step reads; else f32 (the CPU,
// and fp32 or int8 compute). Scores, softmax and sums stay fp32 either way.
DataType kv_cache_type(Device device, ComputeType compute);

// y <- x (f32) in y's type: f32, or a kv_cache_type (values rounded as a half GEMM input is,
// math::half_input_bits). Same element count, one device. The cross-attention K/V GEMM's fp32
// output on its way into a half cache.
void convert(const TensorView& x, const TensorView& y);

// attention() for a decoder step: every sequence has one query row (at q_pos), so a GPU runs it
// as one fused launch, FasterTransformer's decoder masked multi-head attention: the new key and
// value (new_k / new_v, when given) into the cache, the scores with the position bias, the
// causal mask, the fp32 softmax and the values' weighted sum for every sequence and head. The
// self-attention of a step (bias, causal, append) and its cross-attention (neither) alike. The
// CPU runs attention()'s loop, which does the same per sequence. k and v: f32, or both the
// device's kv_cache_type (new_k / new_v stay f32 and are rounded as they are stored).
void decode_attention(const AttentionArgs& args);
// --- GEMM inputs in half precision, written by the op before the GEMM ---
// The type in which a linear layer of weight `w` takes its input from the op that writes it
// (rms_norm's y, feed_forward_activation's y): the weight's bf16 / fp16 on a backend whose GEMMs
// read half inputs (CUDA), else f32. The GEMM then casts nothing: the norm or the activation and
// the cast are one kernel. fp16 values are clamped as HF clamps T5's fp16 hidden states
// (math::f16_clamp, src/cuda/half_math.h).
DataType linear_input_type(const LinearWeight& w);

// y <- relu(a) (b empty) or gated_gelu(a, b) (T5 v1.1's gated FFN), in y's type: f32 (y may be
// a itself) or a linear_input_type.
void feed_forward_activation(const TensorView& a, const TensorView& b, const TensorView& y);

// --- The lm_head's choices on the logits' device ---
// The largest k that top_k_log_softmax takes: a beam step's candidates, 2 x the most beams, and
// one more for the eos a beam search may have to leave out (min_new_tokens).
inline constexpr int kMaxTopK = 2 * generation::kMaxBeams + 1;
// Per logits row r, its k best tokens, best first (the lower id among equals, as argmax), into
// ids[r * k + j], and their log-softmax (x - (max + log(sum exp(x - max))), fp32) into
// logprobs[r * k + j]: what a beam step without logits processors needs (2 x beams per beam),
// so that only rows x k ids and log-probs cross from a GPU, not the logits. Fewer than k
// tokens that are not NaN: the rest are id -1, log-prob -inf. ids and logprobs are host memory;
// 1 <= k <= min(kMaxTopK, vocab).
void top_k_log_softmax(const TensorView& logits, int k, int* ids, float* logprobs);

}  // namespace seqpipe::engine::ops
