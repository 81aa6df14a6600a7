#pragma once
// CPU kernels behind the ops (src/ops.h). Plain loops written for the compiler to vectorise.
#include <cstdint>

#include "ops.h"

namespace seqpipe::engine::cpu {

// y[m, n] = x[m, k] * w[n, k]^T + beta * y for few rows: each weight row is read once for all m
// inputs, so a decoder step streams the weights once. OpenBLAS's sgemm packs the whole weight
// matrix on every call, which dominates at small m: bench/linear_bench measured this kernel
// 1.4-3.8x faster for m = 2..8, even at m = 16 and slower at 32, so ops::linear uses it for
// 2 <= m <= kSmallBatchRows (m = 1 goes to the BLAS's gemv).
constexpr int64_t kSmallBatchRows = 12;
void linear_small_batch(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float beta, float* y);

// Threads for the engine's own parallel kernels.
void set_num_threads(int threads);

// Index of the first maximum of row[0, n) (torch.argmax's tie rule).
int64_t argmax(const float* row, int64_t n);

void rms_norm(const float* x, int64_t m, int64_t d, const float* w, float eps, float scale, float* y);
void embedding(const int* ids, int64_t n, const float* table, int64_t d, float* out);
void relu(float* x, int64_t n);
void gated_gelu(float* a, const float* b, int64_t n);
void attention(const ops::AttentionArgs& args);

}  // namespace seqpipe::engine::cpu
