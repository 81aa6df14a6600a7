// The BLAS seam implemented on OpenBLAS (Debian libopenblas-dev).
#include "cpu/blas.h"

#include <cblas.h>

namespace seqpipe::engine::blas {

void gemm(bool b_transposed, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 1 && b_transposed) {
    // One row: a matrix-vector product streams B once; sgemv does that at memory bandwidth.
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(k),
                alpha, b, static_cast<blasint>(ldb), a, 1, beta, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

void set_num_threads(int threads) {
  openblas_set_num_threads(threads < 1 ? 1 : threads);
}

int num_threads() {
  return openblas_get_num_threads();
}

}  // namespace seqpipe::engine::blas
