// Op argument checks and the one dispatch to a device's backend. A device without a backend in
// this build answers with an EngineError instead of failing to link.
#include "ops.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "backend.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

namespace {

// The CPU's backend always; a GPU's once ops::open_device opened it.
Backend* backend_or_null(Device device) {
  switch (device) {
    case Device::kCpu:
      return &cpu::backend();
    case Device::kCuda:
      return cuda::opened();
  }
  return nullptr;
}

Backend& backend_for(Device device, const char* what) {
  Backend* b = backend_or_null(device);
  if (b == nullptr) {
    throw EngineError(std::string(what) + ": device '" + std::string(device_name(device)) +
                      "' is not open (open_device; a model opens its device when it loads)");
  }
  return *b;
}

}  // namespace

void open_device(const DeviceSpec& spec) {
  if (spec.device == Device::kCuda) cuda::open(spec.index);
}

void synchronize(Device device) {
  backend_for(device, "synchronize").synchronize();
}

Allocator& allocator_for(Device device) {
  return backend_for(device, "allocator").allocator();
}

namespace ops {

namespace {

// Messages are built only on failure: the checks run on every op call of a decoder step, which
// allocates nothing.
void require(bool ok, const char* op, const char* what) {
  if (!ok) throw EngineError(std::string("op ") + op + ": " + what);
}
template <typename Message>
void require(bool ok, const char* op, Message&& what) {
  if (!ok) throw EngineError(std::string("op ") + op + ": " + what());
}

// Times an op as the profiler sees it: on a GPU the op only queues work, so with the profiler on
// the timer waits for the device before it stops (the destructor runs before the member's).
class OpTimer {
 public:
  explicit OpTimer(profiler::Op op, Device device) : timer_(op), device_(device) {}
  ~OpTimer() {
    if (device_ != Device::kCpu && profiler::enabled())
      backend_for(device_, "profiler").synchronize();
  }

 private:
  profiler::ScopedOp timer_;
  Device device_;
};

struct Operand {
  const char* name;
  const TensorView& view;
};

// The one place operands are checked against the op's device and type: every operand defined,
// fp32 (the residual stream, norms' weights, logits; the half types a GEMM input or a KV cache
// may be are checked by require_f32_or_half) and on `device`.
// Returns that device's backend.
Backend& dispatch(const char* op, Device device, std::initializer_list<Operand> operands) {
  for (const Operand& o : operands) {
    require(o.view.defined(), op, [&] { return std::string(o.name) + " is empty"; });
    require(o.view.dtype() == DataType::kF32, op, [&] {
      return std::string(o.name) + " is " + std::string(data_type_name(o.view.dtype())) +
             ", not f32";
    });
    require(o.view.device() == device, op, [&] {
      return std::string(o.name) + " is on " + std::string(device_name(o.view.device())) +
             ", the op runs on " + std::string(device_name(device));
    });
  }
  return backend_for(device, op);
}

}  // namespace

void set_num_threads(Device device, int threads) {
  require(threads > 0, "set_num_threads", "threads must be > 0");
  backend_for(device, "set_num_threads").set_num_threads(threads);
}

void copy_to(const TensorView& dst, const TensorView& src) {
  require(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "copy_to", [&] {
    return "dst " + shape_string(dst.shape()) + " " + std::string(data_type_name(dst.dtype())) +
           " != src " + shape_string(src.shape()) + " " + std::string(data_type_name(src.dtype()));
  });
  if (src.numel() == 0) return;
  require(dst.defined() && src.defined(), "copy_to", "an operand is empty");
  // The device that is not the host moves the bytes (host <-> device, or within the device).
  const Device device = dst.device() != Device::kCpu ? dst.device() : src.device();
  require(src.device() == device || src.device() == Device::kCpu, "copy_to",
          "between two accelerators");
  backend_for(device, "copy_to").copy(dst, src);
}

void copy_all(std::span<const TensorCopy> pairs) {
  if (pairs.empty()) return;
  const Device device = pairs.front().dst.device();
  for (const TensorCopy& p : pairs) {
    require(p.dst.defined() && p.src.defined() && p.dst.dtype() == p.src.dtype() &&
                p.dst.numel() == p.src.numel() && p.dst.device() == device &&
                p.src.device() == device,
            "copy_all", [&] {
              return "dst " + shape_string(p.dst.shape()) + " on " +
                     std::string(device_name(p.dst.device())) + " != src " +
                     shape_string(p.src.shape()) + " on " +
                     std::string(device_name(p.src.device())) + " (or another type)";
            });
  }
  backend_for(device, "copy_all").copy_all(pairs);
}

namespace {

bool is_half(DataType t) {
  return t == DataType::kBF16 || t == DataType::kF16;
}

// An operand that is f32, or (half_ok: the op and the backend take one here) bf16 / fp16 (what:
// which half type that is), on `device`.
void require_f32_or_half(const char* op, Device device, const char* name, const TensorView& t,
                         bool half_ok, const char* what) {
  require(t.defined(), op, [&] { return std::string(name) + " is empty"; });
  require(t.device() == device, op, [&] {
    return std::string(name) + " is on " + std::string(device_name(t.device())) +
           ", the op runs on " + std::string(device_name(device));
  });
  require(t.dtype() == DataType::kF32 || (half_ok && is_half(t.dtype())), op, [&] {
    return std::string(name) + " is " + std::string(data_type_name(t.dtype())) + ", not f32" +
           (half_ok ? std::string(" or ") + what : std::string());
  });
}

constexpr const char* kLinearInput = "the linear layer's input type";

// linear()'s and linear_relu()'s check: shapes, x f32 or w's half type where the GEMMs read one,
// y f32 (or, half_y, w's half type too). Returns the weight's backend, or null when there are no
// rows to compute.
Backend* check_linear(const char* op, const TensorView& x, const LinearWeight& w,
                      const TensorView& y, bool half_y) {
  require(w.defined(), op, "weight is empty");
  require(x.rank() == 2 && y.rank() == 2 && x.dim(1) == w.in && y.dim(1) == w.out &&
              x.dim(0) == y.dim(0),
          op, [&] {
            return "x " + shape_string(x.shape()) + " W [" + std::to_string(w.out) + ", " +
                   std::to_string(w.in) + "] y " + shape_string(y.shape());
          });
  if (x.dim(0) == 0) return nullptr;
  Backend& backend = backend_for(w.device, op);
  const bool half_in = is_half(w.dtype) && backend.reads_half_inputs();
  require_f32_or_half(op, w.device, "x", x, half_in && x.dtype() == w.dtype, kLinearInput);
  require_f32_or_half(op, w.device, "y", y, half_y && half_in && y.dtype() == w.dtype,
                      kLinearInput);
  return &backend;
}

}  // namespace

void linear(const TensorView& x, const LinearWeight& w, const TensorView& y, float beta,
            profiler::Op tag) {
  OpTimer timer(tag, w.device);
  if (Backend* backend = check_linear("linear", x, w, y, false)) backend->linear(x, w, y, beta);
}

void linear_relu(const TensorView& x, const LinearWeight& w, const TensorView& y) {
  OpTimer timer(profiler::Op::kLinear, w.device);
  if (Backend* backend = check_linear("linear_relu", x, w, y, true)) backend->linear_relu(x, w, y);
}

LinearWeight prepare_linear(const Tensor& w, const ModelOptions& options) {
  require(w.rank() == 2 && w.device() == Device::kCpu &&
              (w.dtype() == DataType::kF32 ||
               (w.dtype() == DataType::kBF16 && options.compute_type == ComputeType::kBFloat16)),
          "prepare_linear", "weight must be [out, in] on the host, fp32 (or bf16 for bfloat16)");
  require(options.compute_type != ComputeType::kAuto, "prepare_linear",
          "the compute type must be resolved (not auto)");
  LinearWeight lw = backend_for(options.device, "prepare_linear").prepare_linear(w, options);
  lw.device = options.device;
  return lw;
}

ComputeType best_compute_type(Device device) {
  return backend_for(device, "best_compute_type").best_compute_type();
}

void rms_norm(const TensorView& x, const TensorView& w, float eps, float scale,
              const TensorView& y) {
  OpTimer timer(profiler::Op::kRmsNorm, x.device());
  require(w.rank() == 1 && x.rank() == 2 && x.dim(1) == w.dim(0) && y.same_shape(x), "rms_norm",
          [&] {
            return "x " + shape_string(x.shape()) + " w " + shape_string(w.shape()) + " y " +
                   shape_string(y.shape());
          });
  if (x.dim(0) == 0) return;
  Backend& backend = dispatch("rms_norm", x.device(), {{"x", x}, {"w", w}});
  require_f32_or_half("rms_norm", x.device(), "y", y, backend.reads_half_inputs(), kLinearInput);
  backend.rms_norm(x, w, eps, scale, y);
}

TensorView stage_ids(const int* ids, int64_t n, int64_t vocab, Device device, Tensor& staging) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw EngineError("token id " + std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                        std::to_string(vocab) + ")");
    }
  }
  const TensorView host(const_cast<int*>(ids), {n}, DataType::kI32, Device::kCpu);
  if (device == Device::kCpu) return host;
  if (!staging.defined() || staging.numel() < n || staging.device() != device)
    staging = Tensor::empty({std::max<int64_t>(n, 1)}, device, DataType::kI32);
  const TensorView staged = staging.view().rows(0, n);
  copy_to(staged, host);
  return staged;
}

void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) {
  OpTimer timer(profiler::Op::kEmbedding, table.device());
  const int64_t n = ids.rank() == 1 ? ids.dim(0) : -1;
  require(ids.dtype() == DataType::kI32 && ids.device() == table.device() && table.rank() == 2 &&
              out.rank() == 2 && out.dim(0) == n && out.dim(1) == table.dim(1),
          "embedding", [&] {
            return "ids " + shape_string(ids.shape()) + " " +
                   std::string(data_type_name(ids.dtype())) + " on " +
                   std::string(device_name(ids.device())) + ", table " +
                   shape_string(table.shape()) + " out " + shape_string(out.shape());
          });
  if (n == 0) return;
  dispatch("embedding", table.device(), {{"table", table}, {"out", out}})
      .embedding(ids, table, out);
}

void relu(const TensorView& x) {
  OpTimer timer(profiler::Op::kActivation, x.device());
  if (x.numel() == 0) return;
  dispatch("relu", x.device(), {{"x", x}}).relu(x);
}

void gated_gelu(const TensorView& a, const TensorView& b) {
  OpTimer timer(profiler::Op::kActivation, a.device());
  require(a.numel() == b.numel(), "gated_gelu", "a and b differ in size");
  if (a.numel() == 0) return;
  dispatch("gated_gelu", a.device(), {{"a", a}, {"b", b}}).gated_gelu(a, b);
}

Tensor attention_workspace(Device device, int64_t max_keys) {
  require(max_keys > 0, "attention_workspace", "max_keys must be > 0");
  return backend_for(device, "attention_workspace").attention_workspace(max_keys);
}

namespace {

// attention()'s and decode_attention()'s one check of their arguments; returns the backend.
// one_query_row: decode_attention, whose k and v may also be a half KV cache.
Backend& check_attention(const AttentionArgs& args, const char* op, bool one_query_row) {
  const bool half_cache = one_query_row;
  const Device device = args.workspace.device();
  const int64_t width = args.num_heads * args.head_dim;
  Backend* backend = nullptr;
  for (int64_t s = 0; s < args.num_seqs; ++s) {
    const AttentionSequence& seq = args.seqs[s];
    require(seq.k.rank() == 2 && seq.k.dim(0) > 0, op, "a sequence has no keys");
    // Each backend's workspace is [rows, max_keys]: more keys would run past its scores.
    require(args.workspace.rank() == 2 && seq.k.dim(0) <= args.workspace.dim(1), op, [&] {
      return std::to_string(seq.k.dim(0)) + " keys, more than the workspace's " +
             std::to_string(args.workspace.rank() == 2 ? args.workspace.dim(1) : 0);
    });
    require(seq.q.rank() == 2 && seq.q.dim(1) == width && seq.k.dim(1) == width &&
                seq.v.same_shape(seq.k) && seq.out.same_shape(seq.q),
            op, [&] {
              return "q " + shape_string(seq.q.shape()) + " k " + shape_string(seq.k.shape()) +
                     " v " + shape_string(seq.v.shape()) + " out " + shape_string(seq.out.shape());
            });
    require(!one_query_row || seq.q.dim(0) == 1, op, [&] {
      return "a decoder step's query is one row, not " + shape_string(seq.q.shape());
    });
    // A fused projection's thirds: read in place by attention(), never appended to.
    require(seq.row_stride == 0 || (!one_query_row && seq.row_stride >= width &&
                                    !seq.new_k.defined() && !seq.new_v.defined()),
            op, [&] {
              return "row stride " + std::to_string(seq.row_stride) + " for rows of width " +
                     std::to_string(width) +
                     (one_query_row ? " (attention() only)" : " (not with new_k / new_v)");
            });
    backend = &dispatch(op, device, {{"q", seq.q}, {"workspace", args.workspace}});
    // The cache: f32, or (a decoder step's op) the device's half KV cache type; one type for all.
    const bool half_ok = half_cache && backend->holds_half_kv_cache();
    require_f32_or_half(op, device, "k", seq.k, half_ok, "the KV cache's half type");
    require_f32_or_half(op, device, "v", seq.v, half_ok, "the KV cache's half type");
    require(seq.v.dtype() == seq.k.dtype() && seq.k.dtype() == args.seqs[0].k.dtype(), op,
            "the sequences' k and v differ in type");
    // out: f32, or the output projection's half input where the device's GEMMs read one.
    require_f32_or_half(op, device, "out", seq.out, backend->reads_half_inputs(), kLinearInput);
    require(seq.out.dtype() == args.seqs[0].out.dtype(), op, "the sequences' out differ in type");
    if (seq.new_k.defined() || seq.new_v.defined()) {
      require(seq.new_k.same_shape(seq.q) && seq.new_v.same_shape(seq.q) && seq.q_pos >= 0 &&
                  seq.q_pos + seq.q.dim(0) <= seq.k.dim(0),
              op, [&] {
                return "new_k " + shape_string(seq.new_k.shape()) + " new_v " +
                       shape_string(seq.new_v.shape()) + " at row " + std::to_string(seq.q_pos) +
                       " of k " + shape_string(seq.k.shape());
              });
      dispatch(op, device, {{"new_k", seq.new_k}, {"new_v", seq.new_v}});
    }
  }
  if (args.bias != nullptr) dispatch(op, device, {{"bias", args.bias->table}});
  return *backend;
}

}  // namespace

AttentionSequence fused_qkv_sequence(const TensorView& qkv, const TensorView& out) {
  require(qkv.rank() == 2 && out.rank() == 2 && qkv.dim(0) == out.dim(0) &&
              qkv.dim(1) == 3 * out.dim(1) && qkv.dtype() == DataType::kF32,
          "fused_qkv_sequence", [&] {
            return "qkv " + shape_string(qkv.shape()) + " (" +
                   std::string(data_type_name(qkv.dtype())) + ") is not out " +
                   shape_string(out.shape()) + "'s rows x 3 of its width in f32";
          });
  const int64_t rows = qkv.dim(0), width = out.dim(1);
  const auto third = [&](int64_t part) {
    return TensorView(qkv.data() + part * width, {rows, width}, DataType::kF32, qkv.device());
  };
  return {third(0), 0, third(1), third(2), out, {}, {}, qkv.dim(1)};
}

void attention(const AttentionArgs& args) {
  OpTimer timer(profiler::Op::kAttention, args.workspace.device());
  if (args.num_seqs == 0) return;
  check_attention(args, "attention", false).attention(args);
}

void argmax(const TensorView& logits, const int* banned, int* ids) {
  OpTimer timer(profiler::Op::kSearch, logits.device());
  require(logits.rank() == 2 && logits.dim(1) > 0, "argmax",
          [&] { return "logits " + shape_string(logits.shape()) + " is not [rows, vocab]"; });
  for (int64_t r = 0; r < logits.dim(0); ++r) {
    require(banned[r] < logits.dim(1), "argmax", "a banned token is outside the vocabulary");
  }
  if (logits.dim(0) == 0) return;
  dispatch("argmax", logits.device(), {{"logits", logits}}).argmax(logits, banned, ids);
}

RecordedStep::RecordedStep(Device device, bool record, const void* owner, int64_t key) {
  if (!record || device == Device::kCpu || profiler::enabled()) return;
  backend_ = &backend_for(device, "step");
  backend_->begin_step(owner, key);
}

void RecordedStep::finish() {
  Backend* backend = std::exchange(backend_, nullptr);
  if (backend != nullptr) backend->end_step(true);
}

RecordedStep::~RecordedStep() {
  if (backend_ == nullptr) return;
  try {
    backend_->end_step(false);
  } catch (const EngineError&) {  // unwinding an op's error already: that one is the story
  }
}

void forget_recorded_steps(Device device, const void* owner) {
  if (device != Device::kCpu) backend_for(device, "step").forget_steps(owner);
}

// --- Fused attention of a decoder step ---

void decode_attention(const AttentionArgs& args) {
  OpTimer timer(profiler::Op::kAttention, args.workspace.device());
  if (args.num_seqs == 0) return;
  check_attention(args, "decode_attention", true).decode_attention(args);
}

DataType kv_cache_type(Device device, ComputeType compute) {
  const bool half = compute == ComputeType::kBFloat16 || compute == ComputeType::kFloat16;
  if (!half || !backend_for(device, "kv_cache_type").holds_half_kv_cache()) return DataType::kF32;
  return compute == ComputeType::kBFloat16 ? DataType::kBF16 : DataType::kF16;
}

void convert(const TensorView& x, const TensorView& y) {
  OpTimer timer(profiler::Op::kCacheUpdate, x.device());
  require(x.numel() == y.numel(), "convert",
          [&] { return "x " + shape_string(x.shape()) + " y " + shape_string(y.shape()); });
  if (x.numel() == 0) return;
  Backend& backend = dispatch("convert", x.device(), {{"x", x}});
  require_f32_or_half("convert", x.device(), "y", y, backend.holds_half_kv_cache(),
                      "the KV cache's half type");
  backend.convert(x, y);
}

DataType linear_input_type(const LinearWeight& w) {
  require(w.defined(), "linear_input_type", "weight is empty");
  const bool half =
      is_half(w.dtype) && backend_for(w.device, "linear_input_type").reads_half_inputs();
  return half ? w.dtype : DataType::kF32;
}

void feed_forward_activation(const TensorView& a, const TensorView& b, const TensorView& y) {
  OpTimer timer(profiler::Op::kActivation, a.device());
  require(a.numel() == y.numel() && (!b.defined() || b.numel() == a.numel()),
          "feed_forward_activation", [&] {
            return "a " + shape_string(a.shape()) + " b " + shape_string(b.shape()) + " y " +
                   shape_string(y.shape());
          });
  if (a.numel() == 0) return;
  Backend& backend = b.defined()
                         ? dispatch("feed_forward_activation", a.device(), {{"a", a}, {"b", b}})
                         : dispatch("feed_forward_activation", a.device(), {{"a", a}});
  require_f32_or_half("feed_forward_activation", a.device(), "y", y, backend.reads_half_inputs(),
                      kLinearInput);
  backend.feed_forward_activation(a, b, y);
}

void top_k_log_softmax(const TensorView& logits, int k, int* ids, float* logprobs) {
  OpTimer timer(profiler::Op::kSearch, logits.device());
  require(logits.rank() == 2 && logits.dim(1) > 0, "top_k_log_softmax",
          [&] { return "logits " + shape_string(logits.shape()) + " is not [rows, vocab]"; });
  require(k >= 1 && k <= kMaxTopK && k <= logits.dim(1), "top_k_log_softmax", [&] {
    return "k " + std::to_string(k) + " is outside [1, min(" + std::to_string(kMaxTopK) +
           ", vocab)]";
  });
  if (logits.dim(0) == 0) return;
  dispatch("top_k_log_softmax", logits.device(), {{"logits", logits}})
      .top_k_log_softmax(logits, k, ids, logprobs);
}

}  // namespace ops
}  // namespace seqpipe::engine
