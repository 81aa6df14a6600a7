#pragma once
// CPU kernels behind the ops (src/ops.h). Plain loops written for the compiler to vectorise.
#include <cstdint>

#include "ops.h"

namespace seqpipe::engine::cpu {

// The fp32 linear layer: linear_tiled for 2 <= m <= kTiledMaxRows, the BLAS otherwise (gemv for
// m = 1, sgemm for large m).
void linear_f32(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float beta,
                float* y);

// y[m, n] = x[m, k] * w[n, k]^T + beta * y, the shapes of a decoder step and of an encoder
// batch: weights in HF's [out, in] layout read in place, a 4x4 register tile over (input rows,
// weight rows), weight blocks split across threads, input rows taken 128 at a time so they stay
// in L2. OpenBLAS's sgemm packs the whole weight matrix on every call, which dominates at small
// m; bench/linear_bench measured this kernel 1.1-8x faster than it for m = 2..288 on t5-small's
// shapes (docs/PERFORMANCE.md).
constexpr int64_t kTiledMaxRows = 512;
void linear_tiled(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float beta,
                  float* y);

// The bf16 and int8 linear layers' own kernels, for CPUs where oneDNN has no fast path
// (src/cpu/onednn.h): plain loops the compiler vectorises, fp32 / int32 sums. Weights [n, k]
// row-major; int8: per output channel scales[n], activations quantized per row (quantize_rows).
void linear_bf16(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k, float beta,
                 float* y);
void linear_int8(const float* x, int64_t m, const int8_t* w, const float* scales, int64_t n,
                 int64_t k, float beta, float* y);

// fp32 -> bf16, rounded to nearest even (NaN stays NaN).
void to_bf16(const float* x, int64_t n, uint16_t* out);
// Symmetric int8 per row: scales[r] = max|x[r]| / 127, q[r][i] = round(x[r][i] / scales[r]) in
// [-127, 127] (an all-zero row: scale 0, q 0).
void quantize_rows(const float* x, int64_t m, int64_t k, int8_t* q, float* scales);

// Threads for the engine's own parallel kernels.
void set_num_threads(int threads);
int num_threads();
// The most threads set_num_threads may give (the OpenMP maximum at start-up).
int max_threads();

// Index of the first maximum of row[0, n) (torch.argmax's tie rule).
int64_t argmax(const float* row, int64_t n);

void rms_norm(const float* x, int64_t m, int64_t d, const float* w, float eps, float scale,
              float* y);
void embedding(const int* ids, int64_t n, const float* table, int64_t d, float* out);
void relu(float* x, int64_t n);
void gated_gelu(float* a, const float* b, int64_t n);
// The workspace holds max_threads() rows of scratch (one per thread: sequences run in parallel);
// each row must hold a sequence's keys.
void attention(const ops::AttentionArgs& args);

}  // namespace seqpipe::engine::cpu
