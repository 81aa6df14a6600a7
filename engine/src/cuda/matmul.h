#pragma once
// cuBLASLt's side of the CUDA backend's linear layers (src/cuda/backend.cu): the library's
// handle and, per GEMM (shape, input type, output type, epilogue), its descriptors and the
// algorithm cuBLASLt's heuristic picks, made on the first call and kept.
#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine::cuda {

// f32, bf16 or fp16 as cuBLASLt names them.
cudaDataType_t cuda_type(DataType t);

// Row-major y[m, n] = x[m, k] W[n, k]^T (+ beta y), with fp32 sums: A = W, B = x, C = D = y.
struct MatmulPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

class MatmulPlans {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's scratch

  MatmulPlans();
  MatmulPlans(const MatmulPlans&) = delete;
  MatmulPlans& operator=(const MatmulPlans&) = delete;

  cublasLtHandle_t handle() const { return handle_; }
  // The plan of a GEMM of inputs in `type` writing `out` (f32, or `type` itself), then ReLU
  // where `relu` (cuBLASLt's epilogue). EngineError for a dimension of 2^20 or more, or a GEMM
  // cuBLASLt has no algorithm for.
  MatmulPlan& get(int64_t m, int64_t n, int64_t k, DataType type, DataType out, bool relu);

 private:
  cublasLtHandle_t handle_ = nullptr;
  std::unordered_map<uint64_t, MatmulPlan> plans_;
};

}  // namespace seqpipe::engine::cuda
