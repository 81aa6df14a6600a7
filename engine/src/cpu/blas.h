#pragma once
// The one seam to the BLAS library chosen at configure time (OpenBLAS on Debian).
// Row-major only; the engine's linear layers are C[M,N] = alpha * A[M,K] * B[N,K]^T + beta * C,
// the layout HuggingFace stores nn.Linear weights in ([out, in]).
#include <cstdint>

namespace seqpipe::engine::blas {

// C[M,N] = alpha * A[M,K] (lda) x op(B) + beta * C (ldc); op(B) = B^T when b_transposed
// (B stored [N,K], ldb), else B stored [K,N].
void gemm(bool b_transposed, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Threads the BLAS may use for one call (the engine's own kernels follow the same setting).
void set_num_threads(int threads);
int num_threads();

}  // namespace seqpipe::engine::blas
