#pragma once
// cuBLASLt, loaded when a GPU is opened rather than linked: its library carries 94 KB of
// thread-local storage, which glibc adds to every thread a linking process starts, and Debian's
// civetweb (the /metrics server of every service) starts its threads with 100 KB stacks, which
// then fail to start. So a CPU-only process never loads it. The entry points the backend calls,
// with cuBLASLt's own signatures.
#include <cublasLt.h>

namespace seqpipe::engine::cuda {

struct CublasLt {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtMatmulDescCreate) matmul_desc_create;
  decltype(&::cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute;
  decltype(&::cublasLtMatrixLayoutCreate) matrix_layout_create;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&::cublasLtMatmul) matmul;

  // Loaded once; EngineError naming the library and what is missing when it cannot be.
  static const CublasLt& get();
};

}  // namespace seqpipe::engine::cuda
