// The CPU backend: aligned host memory, memcpy, and the kernels of src/cpu/ (the engine's own,
// oneDNN's matmul for bf16 / int8; fp32: the engine's packed_gemm on AVX-512, else the BLAS and
// linear_tiled). The thread count, the tiling thresholds and
// the per-thread attention scratch are this backend's business, not the ops'.
#include "backend.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "cpu/blas.h"
#include "cpu/kernels.h"
#include "cpu/onednn.h"
#include "cpu/packed_gemm.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine::cpu {

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, bytes == 0 ? kAlignment : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p) override { std::free(p); }
};

class CpuBackend final : public Backend {
 public:
  Allocator& allocator() override { return allocator_; }

  void copy(const TensorView& dst, const TensorView& src) override {
    std::memmove(dst.data_as<void>(), src.data_as<void>(), static_cast<size_t>(src.bytes()));
  }

  void copy_all(std::span<const TensorCopy> pairs) override {
    for (const TensorCopy& p : pairs) copy(p.dst, p.src);
  }

  void synchronize() override {}

  void set_num_threads(int threads) override {
    blas::set_num_threads(threads);
    cpu::set_num_threads(threads);
  }

  LinearWeight prepare_linear(const Tensor& w, const ModelOptions& options) override {
    const ComputeType type = options.compute_type;
    const CpuKernels kernels = options.cpu_kernels;
    LinearWeight lw;
    lw.out = w.dim(0);
    lw.in = w.dim(1);
    switch (type) {
      case ComputeType::kFloat32:
        if (kernels == CpuKernels::kBest && packed_gemm_f32_runs() && w.dtype() == DataType::kF32) {
          auto packed = std::make_shared<PackedF32Weight>();
          packed->data = Tensor::empty({packed_f32_size(lw.out, lw.in)});
          pack_f32(w.data(), lw.out, lw.in, packed->data.data());
          lw.packed = std::move(packed);
        } else {
          lw.weight = w;
        }
        return lw;
      case ComputeType::kBFloat16:
        lw.dtype = DataType::kBF16;
        if (kernels == CpuKernels::kBest && onednn_runs(lw.dtype)) {
          lw.packed = pack_weight(w, lw.dtype);
        } else if (w.dtype() == DataType::kBF16) {
          lw.weight = w;  // a bf16 checkpoint's tensor, used in place
        } else {
          lw.weight = Tensor::empty(w.shape(), Device::kCpu, DataType::kBF16);
          to_bf16(w.data(), w.numel(), lw.weight.data_as<uint16_t>());
        }
        return lw;
      case ComputeType::kInt8:
      case ComputeType::kInt8BFloat16:
        lw.dtype = DataType::kI8;
        lw.weight = Tensor::empty(w.shape(), Device::kCpu, DataType::kI8);
        lw.scales = Tensor::empty({lw.out});
        quantize_rows(w.data(), lw.out, lw.in, lw.weight.data_as<int8_t>(), lw.scales.data());
        if (kernels == CpuKernels::kBest && onednn_runs(lw.dtype)) {
          lw.packed = pack_weight(lw.weight, lw.dtype);
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

  ComputeType best_compute_type() override {
    if (onednn_runs(DataType::kI8)) return ComputeType::kInt8;
    if (onednn_runs(DataType::kBF16)) return ComputeType::kBFloat16;
    return ComputeType::kFloat32;
  }

  void linear(const TensorView& x, const LinearWeight& w, const TensorView& y,
              float beta) override {
    const int64_t m = x.dim(0), n = w.out, k = w.in;
    if (w.packed && w.dtype == DataType::kF32) {
      packed_gemm_f32(x.data(), m, k, static_cast<const PackedF32Weight&>(*w.packed).data.data(), n,
                      beta, y.data());
    } else if (w.packed) {
      linear_packed(x.data(), m, static_cast<const OneDnnWeight&>(*w.packed), w.scales.data(), beta,
                    y.data());
    } else if (w.dtype == DataType::kBF16) {
      linear_bf16(x.data(), m, w.weight.data_as<uint16_t>(), n, k, beta, y.data());
    } else if (w.dtype == DataType::kI8) {
      linear_int8(x.data(), m, w.weight.data_as<int8_t>(), w.scales.data(), n, k, beta, y.data());
    } else {
      linear_f32(x.data(), m, w.weight.data(), n, k, beta, y.data());
    }
  }

  void rms_norm(const TensorView& x, const TensorView& w, float eps, float scale,
                const TensorView& y) override {
    cpu::rms_norm(x.data(), x.dim(0), w.dim(0), w.data(), eps, scale, y.data());
  }

  void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) override {
    cpu::embedding(ids.data_as<int>(), ids.dim(0), table.data(), table.dim(1), out.data());
  }

  void relu(const TensorView& x) override { cpu::relu(x.data(), x.numel()); }

  void linear_relu(const TensorView& x, const LinearWeight& w, const TensorView& y) override {
    linear(x, w, y, 0.0f);
    cpu::relu(y.data(), y.numel());
  }

  void gated_gelu(const TensorView& a, const TensorView& b) override {
    cpu::gated_gelu(a.data(), b.data(), a.numel());
  }

  // One scratch row per thread that may run (sequences run in parallel).
  Tensor attention_workspace(int64_t max_keys) override {
    return Tensor::empty({static_cast<int64_t>(max_threads()), max_keys});
  }

  void attention(const ops::AttentionArgs& args) override { cpu::attention(args); }

  // y is f32 here (the CPU's GEMMs read f32: ops.cc refuses another type).
  void feed_forward_activation(const TensorView& a, const TensorView& b,
                               const TensorView& y) override {
    if (y.data() != a.data()) std::memcpy(y.data(), a.data(), static_cast<size_t>(a.bytes()));
    if (b.defined()) {
      cpu::gated_gelu(y.data(), b.data(), y.numel());
    } else {
      cpu::relu(y.data(), y.numel());
    }
  }

  // Per row: the log-sum-exp, then the k best by insertion into a k-long list (k <= 32).
  void top_k_log_softmax(const TensorView& logits, int k, int* ids, float* logprobs) override {
    const int64_t vocab = logits.dim(1);
    for (int64_t r = 0; r < logits.dim(0); ++r) {
      const float* row = logits.row(r);
      float max_value = -INFINITY;
      for (int64_t i = 0; i < vocab; ++i) max_value = std::fmax(max_value, row[i]);
      float sum = 0.0f;
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - max_value);
      const float log_sum = std::log(sum);
      int* row_ids = ids + r * k;
      float* row_values = logprobs + r * k;
      int found = 0;
      for (int64_t i = 0; i < vocab; ++i) {
        const float v = row[i];
        if (std::isnan(v) || (found == k && !(v > row_values[k - 1]))) continue;
        int pos = found < k ? found++ : k - 1;  // later equals stay behind: the lower id first
        while (pos > 0 && row_values[pos - 1] < v) {
          row_values[pos] = row_values[pos - 1];
          row_ids[pos] = row_ids[pos - 1];
          --pos;
        }
        row_values[pos] = v;
        row_ids[pos] = static_cast<int>(i);
      }
      for (int j = 0; j < k; ++j) {
        if (j >= found) {
          row_ids[j] = -1;
          row_values[j] = -INFINITY;
        } else {
          row_values[j] = row_values[j] - (max_value + log_sum);  // as search.cc's beams
        }
      }
    }
  }

  void argmax(const TensorView& logits, const int* banned, int* ids) override {
    const int64_t rows = logits.dim(0), vocab = logits.dim(1);
    // Rows in parallel: at batch 32 a greedy step's scan of 32 x 32k logits took ~3.5% of it.
#pragma omp parallel for num_threads(cpu::num_threads()) \
    schedule(static) if (rows > 1 && rows * vocab >= (1 << 16))
    for (int64_t r = 0; r < rows; ++r) {
      float* row = logits.row(r);
      const int ban = banned[r];
      // The banned token is set aside for the scan and put back: the logits stay as they were.
      const float kept = ban >= 0 ? row[ban] : 0.0f;
      if (ban >= 0) row[ban] = -INFINITY;
      ids[r] = static_cast<int>(cpu::argmax(row, vocab));
      if (ban >= 0) row[ban] = kept;
    }
  }

  // --- Fused attention of a decoder step ---
  // attention()'s loop already appends, scores, masks and sums per sequence in one pass.
  void decode_attention(const ops::AttentionArgs& args) override {
    cpu::attention(args);
  }

  // The CPU's KV cache is fp32 (holds_half_kv_cache: no), so y is f32 here.
  void convert(const TensorView& x, const TensorView& y) override {
    if (y.data() != x.data()) std::memcpy(y.data(), x.data(), static_cast<size_t>(x.bytes()));
  }

 private:
  CpuAllocator allocator_;
};

}  // namespace

Backend& backend() {
  // Never destroyed: a tensor in static storage may be freed after any static destructor ran.
  static CpuBackend* const backend = new CpuBackend();
  return *backend;
}

}  // namespace seqpipe::engine::cpu
