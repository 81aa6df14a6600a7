// The CUDA backend, built as a module the engine loads when a GPU is opened (src/cuda/loader.cc):
// device memory from cudaMalloc, every op queued on one stream per process,
// the linear layers through cuBLASLt (src/cuda/matmul.h; fp32, or bf16 / fp16 weights and inputs;
// fp32 sums; outputs in fp32 or the weights' half type), the rest in src/cuda/kernels.cu. Nothing
// public includes a CUDA header: the engine reaches this file only through src/backend.h.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "cuda/attention.h"
#include "cuda/kernel_timer.h"
#include "cuda/kernels.h"
#include "cuda/matmul.h"
#include "cuda/memory.h"
#include "cuda/norm_cast.h"
#include "cuda/out_type.h"
#include "cuda/sampling.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine::cuda {

namespace {

// The profiler's name for a GEMM of weights in `t` (relu: with the ReLU epilogue).
const char* gemm_name(DataType t, bool relu) {
  if (relu) {
    return t == DataType::kBF16  ? "cublasLt GEMM bf16 + ReLU"
           : t == DataType::kF16 ? "cublasLt GEMM fp16 + ReLU"
                                 : "cublasLt GEMM fp32 + ReLU";
  }
  return t == DataType::kBF16  ? "cublasLt GEMM bf16"
         : t == DataType::kF16 ? "cublasLt GEMM fp16"
                               : "cublasLt GEMM fp32";
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : index_(index) {
    bind();
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    workspace_.reserve(MatmulPlans::kWorkspaceBytes);
    int shared = 0;
    check(cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, index),
          "cudaDeviceGetAttribute");
    max_shared_bytes_ = static_cast<size_t>(shared);
    check(cudaHostAlloc(&host_ids_, kMaxRows * sizeof(int), cudaHostAllocDefault), "cudaHostAlloc");
    check(cudaEventCreateWithFlags(&step_done_, cudaEventDisableTiming), "event");
  }

  Allocator& allocator() override {
    bind();
    return allocator_;
  }

  void copy(const TensorView& dst, const TensorView& src) override {
    bind();
    if (mode_ != Mode::kEager) {  // a step's staged tokens: through the arena, no wait
      if (src.device() != Device::kCpu || dst.device() != Device::kCuda)
        throw EngineError("copy: a recorded decoder step copies only from the host to the GPU");
      const size_t bytes = static_cast<size_t>(src.bytes());
      void* host = arena_.take(bytes).first;
      std::memcpy(host, src.data_as<void>(), bytes);
      if (mode_ == Mode::kRecording) {
        check(cudaMemcpyAsync(dst.data_as<void>(), host, bytes, cudaMemcpyHostToDevice, stream_),
              "staging");
      }
      return;
    }
    {
      const KernelTimer::Scope timed(timer_, "memcpy", stream_, true);
      check(cudaMemcpyAsync(dst.data_as<void>(), src.data_as<void>(),
                            static_cast<size_t>(src.bytes()), cudaMemcpyDefault, stream_),
            "cudaMemcpyAsync");
    }
    // Host memory on either side is the caller's again when this returns.
    if (dst.device() == Device::kCpu || src.device() == Device::kCpu) synchronize();
  }

  void copy_all(std::span<const TensorCopy> pairs) override {
    bind();
    if (mode_ != Mode::kEager) throw EngineError("copy_all: not inside a recorded decoder step");
    const size_t bytes = pairs.size() * sizeof(CopyJob);
    auto* jobs = static_cast<CopyJob*>(uploads_.next(bytes));
    for (size_t i = 0; i < pairs.size(); ++i) {
      jobs[i] = {pairs[i].dst.data_as<void>(), pairs[i].src.data_as<void>(), pairs[i].src.bytes()};
    }
    void* device_jobs = copy_jobs_.reserve(bytes);
    uploads_.upload(device_jobs, bytes, stream_);
    const KernelTimer::Scope timed(timer_, "copy_all", stream_, true);
    launch_copy_all(static_cast<const CopyJob*>(device_jobs), static_cast<int64_t>(pairs.size()),
                    stream_);
    check(cudaGetLastError(), "copy_all");
  }

  void synchronize() override {
    bind();
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    timer_.collect();
  }

  void set_num_threads(int) override {}

  LinearWeight prepare_linear(const Tensor& w, const ModelOptions& options) override;

  ComputeType best_compute_type() override { return ComputeType::kBFloat16; }

  void linear(const TensorView& x, const LinearWeight& w, const TensorView& y,
              float beta) override {
    gemm(x, w, y, beta, false);
  }
  void linear_relu(const TensorView& x, const LinearWeight& w, const TensorView& y) override {
    gemm(x, w, y, 0.0f, true);
  }

  void rms_norm(const TensorView& x, const TensorView& w, float eps, float scale,
                const TensorView& y) override {
    bind();
    if (replaying()) return;
    // In y's type: the norm and the next GEMM's cast in one kernel when that is half.
    const KernelTimer::Scope timed(
        timer_, y.dtype() == DataType::kF32 ? "rms_norm" : "rms_norm (to half)", stream_, eager());
    launch_rms_norm_to(x.data(), x.dim(0), w.dim(0), w.data(), eps, scale, y.data_as<void>(),
                       out_type(y.dtype()), stream_);
    check(cudaGetLastError(), "rms_norm");
  }

  void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) override {
    bind();
    if (replaying()) return;
    const KernelTimer::Scope timed(timer_, "embedding", stream_, eager());
    launch_embedding(ids.data_as<int>(), ids.dim(0), table.data(), table.dim(1), out.data(),
                     stream_);
    check(cudaGetLastError(), "embedding");
  }

  void relu(const TensorView& x) override {
    bind();
    if (replaying()) return;
    const KernelTimer::Scope timed(timer_, "relu", stream_, eager());
    launch_relu(x.data(), x.numel(), stream_);
    check(cudaGetLastError(), "relu");
  }

  void gated_gelu(const TensorView& a, const TensorView& b) override {
    bind();
    if (replaying()) return;
    const KernelTimer::Scope timed(timer_, "gated_gelu", stream_, eager());
    launch_gated_gelu(a.data(), b.data(), a.numel(), stream_);
    check(cudaGetLastError(), "gated_gelu");
  }

  // The kernels keep their scores in shared memory; the workspace only marks the device.
  Tensor attention_workspace(int64_t max_keys) override {
    if (std::max(attention_shared_bytes(max_keys), decode_attention_shared_bytes(max_keys)) >
        max_shared_bytes_) {
      throw EngineError("op attention: " + std::to_string(max_keys) +
                        " keys exceed the GPU's shared memory per block");
    }
    return Tensor::empty({1, max_keys}, Device::kCuda);
  }

  void attention(const ops::AttentionArgs& args) override;

  void argmax(const TensorView& logits, const int* banned, int* ids) override;

  void begin_step(const void* owner, int64_t key) override;
  void end_step(bool completed) override;
  void forget_steps(const void* owner) override;

  void decode_attention(const ops::AttentionArgs& args) override;

  bool reads_half_inputs() override { return true; }
  bool holds_half_kv_cache() override { return true; }

  void convert(const TensorView& x, const TensorView& y) override {
    bind();
    if (replaying()) return;
    if (y.dtype() == DataType::kF32) {
      const KernelTimer::Scope timed(timer_, "memcpy", stream_, eager());
      check(cudaMemcpyAsync(y.data(), x.data(), static_cast<size_t>(x.bytes()),
                            cudaMemcpyDeviceToDevice, stream_),
            "convert");
      return;
    }
    const KernelTimer::Scope timed(timer_, "cast to half (KV cache)", stream_, eager());
    launch_to_half_input(x.data(), x.numel(), y.data_as<uint16_t>(), y.dtype() == DataType::kF16,
                         stream_);
    check(cudaGetLastError(), "convert");
  }

  // Only rows x k ids and log-probs cross to the host.
  void top_k_log_softmax(const TensorView& logits, int k, int* ids, float* logprobs) override {
    bind();
    if (mode_ != Mode::kEager) throw EngineError("top_k_log_softmax: not inside a recorded step");
    const int64_t rows = logits.dim(0);
    if (rows > kMaxRows) throw EngineError("op top_k_log_softmax: more than 65536 rows on cuda");
    const size_t count = static_cast<size_t>(rows) * static_cast<size_t>(k);
    auto* device_ids = static_cast<int*>(top_ids_.reserve(count * sizeof(int)));
    auto* device_logprobs = static_cast<float*>(top_logprobs_.reserve(count * sizeof(float)));
    {
      const KernelTimer::Scope timed(timer_, "top_k_log_softmax", stream_, true);
      launch_top_k_log_softmax(logits.data(), rows, logits.dim(1), k, device_ids, device_logprobs,
                               stream_);
    }
    check(cudaGetLastError(), "top_k_log_softmax");
    check(cudaMemcpyAsync(ids, device_ids, count * sizeof(int), cudaMemcpyDeviceToHost, stream_),
          "top-k ids");
    check(cudaMemcpyAsync(logprobs, device_logprobs, count * sizeof(float), cudaMemcpyDeviceToHost,
                          stream_),
          "top-k log-probs");
    synchronize();
  }

  void feed_forward_activation(const TensorView& a, const TensorView& b,
                               const TensorView& y) override {
    bind();
    if (replaying()) return;
    const KernelTimer::Scope timed(
        timer_, y.dtype() == DataType::kF32 ? "ffn activation" : "ffn activation (to half)",
        stream_, eager());
    launch_activation_to(a.data(), b.defined() ? b.data() : nullptr, a.numel(), y.data_as<void>(),
                         out_type(y.dtype()), stream_);
    check(cudaGetLastError(), "feed_forward_activation");
  }

 private:
  static constexpr int64_t kMaxRows = 65536;  // argmax rows per call

  // The calling thread's current device is this backend's GPU (the CUDA runtime keeps the
  // current device per thread, and a stage may call from any of its threads).
  void bind() const {
    thread_local int bound = -1;
    if (bound != index_) {
      check(cudaSetDevice(index_), "cudaSetDevice");
      bound = index_;
    }
  }

  // A decoder step as a CUDA graph: recorded at the second step of its owner and batch size
  // (the first grows the buffers the ops reserve, which a recording must not move), then
  // replayed. Graphs read converted_input_ where it was when they were recorded: when it grows,
  // every graph is dropped.
  struct StepGraph {
    cudaGraphExec_t exec = nullptr;
    int steps = 0;
  };
  enum class Mode { kEager, kRecording, kReplaying };
  bool replaying() const { return mode_ == Mode::kReplaying; }
  bool eager() const { return mode_ == Mode::kEager; }
  void drop_graphs(const void* owner);  // null: every owner's
  // A recorded step's attention jobs (the arena's bytes so far) go up in one copy, the graph's
  // first node, where a copy before each attention kernel was a node each (12 a t5-small step).
  // A replay writes the same jobs at the same places before it launches the graph.
  void upload_arena_first(cudaGraph_t graph);

  // y = x W^T + beta y (relu: then relu, cuBLASLt's epilogue), y in f32 or w's type.
  void gemm(const TensorView& x, const LinearWeight& w, const TensorView& y, float beta, bool relu);
  // An attention call's jobs in device memory (null while a graph replays: the graph's upload
  // copies them) and their shape; `shared_bytes` is the kernel's need for its keys.
  const AttentionJob* stage_attention(const ops::AttentionArgs& args, AttentionShape& shape,
                                      size_t (*shared_bytes)(int64_t));
  // x in the weight's type for the GEMM: itself when it is in that type already (fp32, or a half
  // input an rms_norm or activation wrote), else converted into scratch.
  const void* gemm_input(const TensorView& x, DataType type);

  int index_;
  cudaStream_t stream_ = nullptr;
  CudaAllocator allocator_;
  DeviceBuffer workspace_, converted_input_, jobs_, copy_jobs_, banned_, ids_;
  DeviceBuffer top_ids_, top_logprobs_;  // top_k_log_softmax's results on the device
  UploadRing uploads_;
  int* host_ids_ = nullptr;
  size_t max_shared_bytes_ = 0;
  MatmulPlans plans_;
  std::map<std::pair<const void*, int64_t>, StepGraph> graphs_;
  const void* graphs_input_ = nullptr;  // converted_input_'s buffer the graphs read
  Mode mode_ = Mode::kEager;
  StepGraph* step_ = nullptr;
  StepArena arena_;
  cudaEvent_t step_done_ = nullptr;
  KernelTimer timer_;  // device time per kernel while the profiler is on
};

LinearWeight CudaBackend::prepare_linear(const Tensor& w, const ModelOptions& options) {
  bind();
  LinearWeight lw;
  lw.out = w.dim(0);
  lw.in = w.dim(1);
  switch (options.compute_type) {
    case ComputeType::kFloat32:
      lw.dtype = DataType::kF32;
      break;
    case ComputeType::kBFloat16:
      lw.dtype = DataType::kBF16;
      break;
    case ComputeType::kFloat16:
      lw.dtype = DataType::kF16;
      break;
    default:
      throw EngineError("compute type " + std::string(compute_type_name(options.compute_type)) +
                        " does not run on cuda (float32, bfloat16 or float16)");
  }
  lw.weight = Tensor::empty(w.shape(), Device::kCuda, lw.dtype);
  if (w.dtype() == lw.dtype) {  // fp32 as fp32, or a bf16 checkpoint's tensor as stored
    copy(lw.weight, w);
    return lw;
  }
  const Tensor staged = Tensor::empty(w.shape(), Device::kCuda, DataType::kF32);
  copy(staged, w);
  uint16_t* out = lw.weight.data_as<uint16_t>();
  if (lw.dtype == DataType::kBF16) {
    launch_to_bf16(staged.data(), staged.numel(), out, stream_);
  } else {
    launch_to_f16(staged.data(), staged.numel(), out, stream_);
  }
  check(cudaGetLastError(), "prepare_linear");
  synchronize();  // `staged` is freed on return
  return lw;
}

const void* CudaBackend::gemm_input(const TensorView& x, DataType type) {
  if (x.dtype() == type) return x.data_as<void>();  // written in the GEMM's type by its producer
  const KernelTimer::Scope timed(timer_, "cast to half (GEMM input)", stream_, eager());
  auto* out = static_cast<uint16_t*>(
      converted_input_.reserve(static_cast<size_t>(x.numel()) * sizeof(uint16_t)));
  launch_to_half_input(x.data(), x.numel(), out, type == DataType::kF16, stream_);
  check(cudaGetLastError(), "linear input");
  return out;
}

void CudaBackend::gemm(const TensorView& x, const LinearWeight& w, const TensorView& y, float beta,
                       bool relu) {
  bind();
  if (replaying()) return;
  if (!w.weight.defined() || w.weight.device() != Device::kCuda)
    throw EngineError("op linear: the weight was not prepared for cuda");
  const int64_t m = x.dim(0);
  const MatmulPlan& p = plans_.get(m, w.out, w.in, w.dtype, y.dtype(), relu);
  const void* input = gemm_input(x, w.dtype);
  const float alpha = 1.0f;
  const KernelTimer::Scope timed(timer_, gemm_name(w.dtype, relu), stream_, eager());
  check(cublasLtMatmul(plans_.handle(), p.desc, &alpha, w.weight.data_as<void>(), p.a, input, p.b,
                       &beta, y.data_as<void>(), p.c, y.data_as<void>(), p.c, &p.algo,
                       workspace_.data(), MatmulPlans::kWorkspaceBytes, stream_),
        "cublasLtMatmul");
}

const AttentionJob* CudaBackend::stage_attention(const ops::AttentionArgs& args,
                                                 AttentionShape& shape,
                                                 size_t (*shared_bytes)(int64_t)) {
  bind();
  if (args.head_dim > kMaxHeadDim) {
    throw EngineError("op attention: head_dim " + std::to_string(args.head_dim) + " > " +
                      std::to_string(kMaxHeadDim) + " on cuda");
  }
  const size_t bytes = static_cast<size_t>(args.num_seqs) * sizeof(AttentionJob);
  void* device_jobs = nullptr;
  AttentionJob* jobs = nullptr;
  if (mode_ == Mode::kEager) {
    jobs = static_cast<AttentionJob*>(uploads_.next(bytes));
  } else {
    auto [host, device] = arena_.take(bytes);
    jobs = static_cast<AttentionJob*>(host);
    device_jobs = device;
  }
  shape = {args.num_seqs, args.num_heads, args.head_dim, 0, 0, nullptr, 0, args.causal};
  shape.out_type = out_type(args.seqs[0].out.dtype());  // one type for every job (ops.cc checked)
  for (int64_t s = 0; s < args.num_seqs; ++s) {
    const ops::AttentionSequence& seq = args.seqs[s];
    jobs[s] = {
        seq.q.data(),     seq.k.data_as<void>(), seq.v.data_as<void>(), seq.out.data_as<void>(),
        seq.new_k.data(), seq.new_v.data(),      seq.q.dim(0),          seq.q_pos,
        seq.k.dim(0),     seq.q_row_stride(),    seq.kv_row_stride(),   seq.out.row_size()};
    shape.max_q_rows = std::max(shape.max_q_rows, seq.q.dim(0));
    shape.max_k_rows = std::max(shape.max_k_rows, seq.k.dim(0));
    shape.append = shape.append || seq.new_k.defined();
  }
  if (replaying()) return nullptr;
  // A graph replays its launch sizes: room for as many keys as the workspace allows.
  if (mode_ == Mode::kRecording) shape.max_k_rows = args.workspace.dim(1);
  if (shared_bytes(shape.max_k_rows) > max_shared_bytes_) {
    throw EngineError("op attention: " + std::to_string(shape.max_k_rows) +
                      " keys exceed the GPU's shared memory per block");
  }
  if (args.bias != nullptr) {
    shape.bias = args.bias->table.data();
    shape.max_distance = args.bias->max_distance;
  }
  if (mode_ == Mode::kEager) {  // a recording's jobs go up with the step's one upload (end_step)
    device_jobs = jobs_.reserve(bytes);
    uploads_.upload(device_jobs, bytes, stream_);
  }
  return static_cast<const AttentionJob*>(device_jobs);
}

void CudaBackend::attention(const ops::AttentionArgs& args) {
  AttentionShape shape{};
  const AttentionJob* jobs = stage_attention(args, shape, attention_shared_bytes);
  if (jobs == nullptr) return;
  const KernelTimer::Scope timed(timer_, shape.append ? "attention (with KV append)" : "attention",
                                 stream_, eager());
  launch_attention(jobs, shape, stream_);
  check(cudaGetLastError(), "attention");
}

void CudaBackend::argmax(const TensorView& logits, const int* banned, int* ids) {
  bind();
  const int64_t rows = logits.dim(0);
  if (rows > kMaxRows) throw EngineError("op argmax: more than 65536 rows on cuda");
  const size_t bytes = static_cast<size_t>(rows) * sizeof(int);
  std::memcpy(uploads_.next(bytes), banned, bytes);
  void* device_banned = banned_.reserve(bytes);
  uploads_.upload(device_banned, bytes, stream_);
  auto* device_ids = static_cast<int*>(ids_.reserve(bytes));
  {
    const KernelTimer::Scope timed(timer_, "argmax", stream_, true);
    launch_argmax(logits.data(), rows, logits.dim(1), static_cast<const int*>(device_banned),
                  device_ids, stream_);
  }
  check(cudaGetLastError(), "argmax");
  check(cudaMemcpyAsync(host_ids_, device_ids, bytes, cudaMemcpyDeviceToHost, stream_),
        "argmax ids");
  synchronize();
  std::memcpy(ids, host_ids_, bytes);
}

void CudaBackend::begin_step(const void* owner, int64_t key) {
  bind();
  if (converted_input_.data() != graphs_input_) {  // grown since: the graphs read freed memory
    drop_graphs(nullptr);
    graphs_input_ = converted_input_.data();
  }
  StepGraph& graph = graphs_[{owner, key}];
  if (graph.exec == nullptr && ++graph.steps < 2) return;           // the first runs op by op
  check(cudaEventSynchronize(step_done_), "cudaEventSynchronize");  // the arena is free again
  arena_.rewind();
  step_ = &graph;
  if (graph.exec != nullptr) {
    mode_ = Mode::kReplaying;
    return;
  }
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture");
  mode_ = Mode::kRecording;
}

void CudaBackend::end_step(bool completed) {
  if (mode_ == Mode::kEager) return;
  const Mode mode = std::exchange(mode_, Mode::kEager);
  StepGraph& graph = *std::exchange(step_, nullptr);
  if (mode == Mode::kRecording) {
    cudaGraph_t recorded = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &recorded);
    if (ended == cudaSuccess && completed && converted_input_.data() != graphs_input_) {
      cudaGraphDestroy(recorded);
      throw EngineError("a recorded decoder step grew a buffer its graph reads");
    }
    if (ended != cudaSuccess || !completed) {
      if (recorded != nullptr) cudaGraphDestroy(recorded);
      cudaGetLastError();
      graph.steps = 0;
      if (completed) check(ended, "cudaStreamEndCapture");
      return;
    }
    try {
      upload_arena_first(recorded);
    } catch (const EngineError&) {
      cudaGraphDestroy(recorded);
      throw;
    }
    const cudaError_t made = cudaGraphInstantiate(&graph.exec, recorded, 0);
    cudaGraphDestroy(recorded);
    check(made, "cudaGraphInstantiate");
  }
  if (!completed) return;  // replayed ops are issued only here: nothing ran
  check(cudaGraphLaunch(graph.exec, stream_), "cudaGraphLaunch");
  check(cudaEventRecord(step_done_, stream_), "cudaEventRecord");
}

void CudaBackend::upload_arena_first(cudaGraph_t graph) {
  if (arena_.used() == 0) return;
  size_t count = 0;
  check(cudaGraphGetRootNodes(graph, nullptr, &count), "cudaGraphGetRootNodes");
  std::vector<cudaGraphNode_t> roots(count);
  check(cudaGraphGetRootNodes(graph, roots.data(), &count), "cudaGraphGetRootNodes");
  cudaGraphNode_t upload = nullptr;
  check(cudaGraphAddMemcpyNode1D(&upload, graph, nullptr, 0, arena_.device(), arena_.host(),
                                 arena_.used(), cudaMemcpyHostToDevice),
        "cudaGraphAddMemcpyNode1D");
  const std::vector<cudaGraphNode_t> from(count, upload);
  check(cudaGraphAddDependencies(graph, from.data(), roots.data(), nullptr, count),
        "cudaGraphAddDependencies");
}

void CudaBackend::forget_steps(const void* owner) {
  bind();
  drop_graphs(owner);
}

// --- Fused attention of a decoder step ---

void CudaBackend::decode_attention(const ops::AttentionArgs& args) {
  AttentionShape shape{};
  const AttentionJob* jobs = stage_attention(args, shape, decode_attention_shared_bytes);
  if (jobs == nullptr) return;
  const DataType cache = args.seqs[0].k.dtype();  // one type for every job (ops.cc checked)
  const KernelTimer::Scope timed(
      timer_,
      cache == DataType::kF32 ? "decode attention (fused)" : "decode attention (fused, half KV)",
      stream_, eager());
  launch_decode_attention(jobs, shape,
                          cache == DataType::kBF16  ? CacheType::kBF16
                          : cache == DataType::kF16 ? CacheType::kF16
                                                    : CacheType::kF32,
                          stream_);
  check(cudaGetLastError(), "decode_attention");
}

void CudaBackend::drop_graphs(const void* owner) {
  check(cudaEventSynchronize(step_done_), "cudaEventSynchronize");  // none still running
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    if (owner != nullptr && it->first.first != owner) {
      ++it;
      continue;
    }
    if (it->second.exec != nullptr) cudaGraphExecDestroy(it->second.exec);
    it = graphs_.erase(it);
  }
}

}  // namespace
}  // namespace seqpipe::engine::cuda

// The module's one entry point: src/cuda/loader.cc calls it once per process, for the GPU the
// process uses. EngineError (caught in the engine: both sides share libstdc++) when there is no
// such GPU.
extern "C" __attribute__((visibility("default"))) seqpipe::engine::Backend* seqpipe_cuda_open(
    int index) {
  using seqpipe::engine::EngineError;
  const std::string name = "device cuda:" + std::to_string(index);
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw EngineError(name + ": no CUDA device on this machine (" +
                      std::string(cudaGetErrorString(status)) + ")");
  }
  if (index < 0 || index >= count) {
    throw EngineError(name + ": this machine has " + std::to_string(count) + " CUDA device" +
                      (count == 1 ? "" : "s"));
  }
  return new seqpipe::engine::cuda::CudaBackend(index);  // never destroyed, as the CPU's
}
