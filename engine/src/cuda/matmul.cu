#include <string>

#include "cuda/matmul.h"
#include "cuda/memory.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine::cuda {

cudaDataType_t cuda_type(DataType t) {
  return t == DataType::kBF16 ? CUDA_R_16BF : t == DataType::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

MatmulPlans::MatmulPlans() {
  check(cublasLtCreate(&handle_), "cublasLtCreate");
}

MatmulPlan& MatmulPlans::get(int64_t m, int64_t n, int64_t k, DataType type, DataType out,
                             bool relu) {
  constexpr int64_t kLimit = int64_t{1} << 20;
  if (m >= kLimit || n >= kLimit || k >= kLimit)
    throw EngineError("op linear: a GEMM dimension reaches 2^20 (" + std::to_string(m) + ")");
  // Bits 0-1 the input type, 2-61 the shape, 62 the epilogue, 63 a half output.
  const uint64_t type_bits = type == DataType::kBF16 ? 1 : type == DataType::kF16 ? 2 : 0;
  const uint64_t key = (static_cast<uint64_t>(relu) << 62) |
                       (static_cast<uint64_t>(out != DataType::kF32) << 63) |
                       (static_cast<uint64_t>(m) << 42) | (static_cast<uint64_t>(n) << 22) |
                       (static_cast<uint64_t>(k) << 2) | type_bits;
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;

  // Row-major y[m, n] = x[m, k] W[n, k]^T is column-major y^T[n, m] = W^T' x^T: A = W read
  // transposed (column-major k x n), B = x (column-major k x m), C = y (column-major n x m).
  MatmulPlan p;
  check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  const cublasOperation_t transpose = CUBLAS_OP_T;
  check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                       sizeof(transpose)),
        "TRANSA");
  if (relu) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_RELU;
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                         sizeof(epilogue)),
          "EPILOGUE");
  }
  const cudaDataType_t input = cuda_type(type);
  check(cublasLtMatrixLayoutCreate(&p.a, input, static_cast<uint64_t>(k), static_cast<uint64_t>(n),
                                   k),
        "layout A");
  check(cublasLtMatrixLayoutCreate(&p.b, input, static_cast<uint64_t>(k), static_cast<uint64_t>(m),
                                   k),
        "layout B");
  check(cublasLtMatrixLayoutCreate(&p.c, cuda_type(out), static_cast<uint64_t>(n),
                                   static_cast<uint64_t>(m), n),
        "layout C");
  cublasLtMatmulPreference_t preference = nullptr;
  check(cublasLtMatmulPreferenceCreate(&preference), "PreferenceCreate");
  const size_t workspace = kWorkspaceBytes;
  check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace, sizeof(workspace)),
        "workspace preference");
  cublasLtMatmulHeuristicResult_t result{};
  int found_algos = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle_, p.desc, p.a, p.b, p.c, p.c, preference, 1, &result, &found_algos);
  cublasLtMatmulPreferenceDestroy(preference);
  check(status, "AlgoGetHeuristic");
  if (found_algos == 0) {
    throw EngineError("cublasLt: no algorithm for a " + std::to_string(m) + " x " +
                      std::to_string(n) + " x " + std::to_string(k) + " GEMM");
  }
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

}  // namespace seqpipe::engine::cuda
