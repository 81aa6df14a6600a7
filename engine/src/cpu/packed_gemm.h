#pragma once
// The engine's own bf16 and int8 GEMMs (a decoder step's; int8's of every size) over weights in
// oneDNN's packed layout (onednn.h).
// oneDNN 2.6 allocates on every matmul execute (dnnl_primitive_execute builds a hash map of its
// arguments), which a decoder step must not do. The weights are packed in one of its layouts, a
// plain one, asked for by name (onednn.cc: left to choose, oneDNN may take a narrower one), so
// these loops run the same instructions over it (VNNI's vpdpbusd, AVX512_BF16's vdpbf16ps): for
// int8 at every row count (on AMX, up to kPackedGemmMaxRows), for bf16 up to kPackedGemmMaxRows
// rows; oneDNN's execute the rest.
//
// Layout (oneDNN's BA16a64b4a for s8, BA16a64b2a for bf16, of the logical [k, n] weight): blocks
// of 64 output columns, `block_stride` elements apart; inside one, for each group of kVnni
// consecutive k (4 for s8, 2 for bf16), 64 columns x kVnni values. Columns past n and k past the
// weight's k are zero.
#include <cstdint>

#include "seqpipe/engine/model.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine::cpu {

inline constexpr int64_t kPackedGemmMaxRows = 64;

// What turns the int32 sums of an int8 layer into its fp32 output: x was quantized per row
// (x_scales[m]) and shifted to u8 by +128, W per output column (scales[n], with each column's
// sum of weights, sums[n], to take the shift out again):
//   y[r][j] = (acc[r][j] - 128 sums[j]) * x_scales[r] * scales[j] + beta * y[r][j].
struct U8S8Output {
  const int32_t* sums = nullptr;
  const float* scales = nullptr;
  const float* x_scales = nullptr;
  float beta = 0.0f;  // 0: y is only written (it may hold NaN)
};

// y[m, n] (fp32, row stride n) from x[m, k] (u8, row stride k) * W through `output`; k % 4 == 0.
void packed_gemm_u8s8(const uint8_t* x, int64_t m, int64_t k, const int8_t* w, int64_t block_stride,
                      int64_t n, const U8S8Output& output, float* y);
// y[m, n] (fp32, row stride n) = x[m, k] (bf16, row stride k) * W + beta * y; k % 2 == 0.
void packed_gemm_bf16(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w,
                      int64_t block_stride, int64_t n, float beta, float* y);

// fp32 in the same block layout with kVnni = 1 (block_stride = k * 64 floats), packed by the
// engine itself (oneDNN 2.6 has no fp32 layout this simple): one 64-column block is a broadcast
// FMA's 4 registers per k. packed[b * k * 64 + i * 64 + c] = w[(64 b + c) * k + i], zero past n.
void pack_f32(const float* w, int64_t n, int64_t k, float* packed);
inline int64_t packed_f32_size(int64_t n, int64_t k) {
  return (n + 63) / 64 * 64 * k;
}
// y[m, n] (row stride n) = x[m, k] (row stride k) * W + beta * y, W packed by pack_f32; for
// every m (bench/linear_bench measured it as fast as OpenBLAS's sgemm or faster from m = 1 to
// 288 on t5-small's shapes, docs/PERFORMANCE.md). Needs AVX-512F (packed_gemm_f32_runs).
bool packed_gemm_f32_runs();
void packed_gemm_f32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float beta,
                     float* y);

// An fp32 linear weight packed by pack_f32 (`data` holds packed_f32_size(out, in) floats).
struct PackedF32Weight : PackedWeight {
  int64_t bytes() const override { return data.bytes(); }
  Tensor data;
};

}  // namespace seqpipe::engine::cpu
