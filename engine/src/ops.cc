// Op argument checks and the one dispatch to a device's backend. A device without a backend in
// this build answers with an EngineError instead of failing to link.
#include "ops.h"

#include <initializer_list>
#include <string>

#include "backend.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

namespace {

// The backends built in: a CUDA build adds its case here.
Backend* backend_or_null(Device device) {
  switch (device) {
    case Device::kCpu:
      return &cpu::backend();
    case Device::kCuda:
      return nullptr;
  }
  return nullptr;
}

Backend& backend_for(Device device, const char* what) {
  Backend* b = backend_or_null(device);
  if (b == nullptr) {
    throw EngineError(std::string(what) + ": device '" + std::string(device_name(device)) +
                      "' has no backend in this build");
  }
  return *b;
}

}  // namespace

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

struct Operand {
  const char* name;
  const TensorView& view;
};

// The one place operands are checked against the op's device and type: every operand defined,
// fp32 (activations, norms and the KV cache are fp32 in every compute type) and on `device`.
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

void linear(const TensorView& x, const LinearWeight& w, const TensorView& y, float beta,
            profiler::Op tag) {
  profiler::ScopedOp timer(tag);
  require(w.defined(), "linear", "weight is empty");
  require(x.rank() == 2 && y.rank() == 2 && x.dim(1) == w.in && y.dim(1) == w.out &&
              x.dim(0) == y.dim(0),
          "linear", [&] {
            return "x " + shape_string(x.shape()) + " W [" + std::to_string(w.out) + ", " +
                   std::to_string(w.in) + "] y " + shape_string(y.shape());
          });
  if (x.dim(0) == 0) return;
  dispatch("linear", w.device, {{"x", x}, {"y", y}}).linear(x, w, y, beta);
}

LinearWeight prepare_linear(Device device, const Tensor& w, ComputeType type, CpuKernels kernels) {
  require(w.rank() == 2 && w.device() == Device::kCpu &&
              (w.dtype() == DataType::kF32 ||
               (w.dtype() == DataType::kBF16 && type == ComputeType::kBFloat16)),
          "prepare_linear", "weight must be [out, in] on the host, fp32 (or bf16 for bfloat16)");
  LinearWeight lw = backend_for(device, "prepare_linear").prepare_linear(w, type, kernels);
  lw.device = device;
  return lw;
}

ComputeType best_compute_type(Device device) {
  return backend_for(device, "best_compute_type").best_compute_type();
}

void rms_norm(const TensorView& x, const TensorView& w, float eps, float scale,
              const TensorView& y) {
  profiler::ScopedOp timer(profiler::Op::kRmsNorm);
  require(w.rank() == 1 && x.rank() == 2 && x.dim(1) == w.dim(0) && y.same_shape(x), "rms_norm",
          [&] {
            return "x " + shape_string(x.shape()) + " w " + shape_string(w.shape()) + " y " +
                   shape_string(y.shape());
          });
  if (x.dim(0) == 0) return;
  dispatch("rms_norm", x.device(), {{"x", x}, {"w", w}, {"y", y}}).rms_norm(x, w, eps, scale, y);
}

void embedding(const int* ids, int64_t n, const TensorView& table, const TensorView& out) {
  profiler::ScopedOp timer(profiler::Op::kEmbedding);
  require(table.rank() == 2 && out.rank() == 2 && out.dim(0) == n && out.dim(1) == table.dim(1),
          "embedding", [&] {
            return "table " + shape_string(table.shape()) + " out " + shape_string(out.shape()) +
                   " for " + std::to_string(n) + " ids";
          });
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= table.dim(0)) {
      throw EngineError("token id " + std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                        std::to_string(table.dim(0)) + ")");
    }
  }
  if (n == 0) return;
  dispatch("embedding", table.device(), {{"table", table}, {"out", out}})
      .embedding(ids, n, table, out);
}

void relu(const TensorView& x) {
  profiler::ScopedOp timer(profiler::Op::kActivation);
  if (x.numel() == 0) return;
  dispatch("relu", x.device(), {{"x", x}}).relu(x);
}

void gated_gelu(const TensorView& a, const TensorView& b) {
  profiler::ScopedOp timer(profiler::Op::kActivation);
  require(a.numel() == b.numel(), "gated_gelu", "a and b differ in size");
  if (a.numel() == 0) return;
  dispatch("gated_gelu", a.device(), {{"a", a}, {"b", b}}).gated_gelu(a, b);
}

Tensor attention_workspace(Device device, int64_t max_keys) {
  require(max_keys > 0, "attention_workspace", "max_keys must be > 0");
  return backend_for(device, "attention_workspace").attention_workspace(max_keys);
}

void attention(const AttentionArgs& args) {
  profiler::ScopedOp timer(profiler::Op::kAttention);
  if (args.num_seqs == 0) return;
  const int64_t width = args.num_heads * args.head_dim;
  const Device device = args.workspace.device();
  Backend* backend = nullptr;
  for (int64_t s = 0; s < args.num_seqs; ++s) {
    const AttentionSequence& seq = args.seqs[s];
    require(seq.k.rank() == 2 && seq.k.dim(0) > 0, "attention", "a sequence has no keys");
    require(seq.q.rank() == 2 && seq.q.dim(1) == width && seq.k.dim(1) == width &&
                seq.v.same_shape(seq.k) && seq.out.same_shape(seq.q),
            "attention", [&] {
              return "q " + shape_string(seq.q.shape()) + " k " + shape_string(seq.k.shape()) +
                     " v " + shape_string(seq.v.shape()) + " out " + shape_string(seq.out.shape());
            });
    backend = &dispatch("attention", device,
                        {{"q", seq.q},
                         {"k", seq.k},
                         {"v", seq.v},
                         {"out", seq.out},
                         {"workspace", args.workspace}});
    if (seq.new_k.defined() || seq.new_v.defined()) {
      require(seq.new_k.same_shape(seq.q) && seq.new_v.same_shape(seq.q) && seq.q_pos >= 0 &&
                  seq.q_pos + seq.q.dim(0) <= seq.k.dim(0),
              "attention", [&] {
                return "new_k " + shape_string(seq.new_k.shape()) + " new_v " +
                       shape_string(seq.new_v.shape()) + " at row " + std::to_string(seq.q_pos) +
                       " of k " + shape_string(seq.k.shape());
              });
      dispatch("attention", device, {{"new_k", seq.new_k}, {"new_v", seq.new_v}});
    }
  }
  if (args.bias != nullptr) dispatch("attention", device, {{"bias", args.bias->table}});
  backend->attention(args);
}

}  // namespace ops
}  // namespace seqpipe::engine
