#pragma once
// CPU kernels behind the ops (src/ops.h). Plain loops written for the compiler to vectorise.
#include <cstdint>

#include "ops.h"

namespace seqpipe::engine::cpu {

// y[m, n] = x[m, k] * w[n, k]^T + beta * y, the shapes of a decoder step and of an encoder
// batch: weights in HF's [out, in] layout read in place, a 4x4 register tile over (input rows,
// weight rows), weight blocks split across threads, input rows taken 128 at a time so they stay
// in L2. OpenBLAS's sgemm packs the whole weight matrix on every call, which dominates at small
// m; bench/linear_bench measured this kernel 1.1-8x faster than it for m = 2..288 on t5-small's
// shapes (docs/PERFORMANCE.md). ops::linear uses it for 2 <= m <= kTiledMaxRows and the BLAS
// otherwise (gemv for m = 1, sgemm for large m).
constexpr int64_t kTiledMaxRows = 512;
void linear_tiled(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float beta,
                  float* y);

// Threads for the engine's own parallel kernels.
void set_num_threads(int threads);
// The most threads set_num_threads may give (the OpenMP maximum at start-up).
int max_threads();

// Index of the first maximum of row[0, n) (torch.argmax's tie rule).
int64_t argmax(const float* row, int64_t n);

void rms_norm(const float* x, int64_t m, int64_t d, const float* w, float eps, float scale,
              float* y);
void embedding(const int* ids, int64_t n, const float* table, int64_t d, float* out);
void relu(float* x, int64_t n);
void gated_gelu(float* a, const float* b, int64_t n);
void attention(const ops::AttentionArgs& args);

}  // namespace seqpipe::engine::cpu
