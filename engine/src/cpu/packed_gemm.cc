#include "cpu/packed_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "cpu/kernels.h"

namespace seqpipe::engine::cpu {

namespace {

constexpr int64_t kBlockCols = 64;  // 4 registers of 16 lanes
// Input rows per tile. int8: 6 x 4 accumulators, 4 weight registers and a broadcast, 29 of 32
// registers; it was 4 rows, and 6 took 512 x 2048 at 32 rows from 95-97 to 79-81 us (a weight
// load now feeds 6 vpdpbusd). bf16 keeps 4 x 4 (21 of 32): not measured on a machine with it.
constexpr int kU8S8TileRows = 6;
constexpr int kBf16TileRows = 4;

// Lanes of register j (16 columns) that hold columns below `cols`.
inline __mmask16 column_mask(int64_t cols, int j) {
  const int64_t valid = std::clamp<int64_t>(cols - 16 * j, 0, 16);
  return static_cast<__mmask16>(valid == 16 ? 0xffff : (1u << valid) - 1);
}

// Cache lines of the weight block a thread takes next, asked into L2 while this one computes:
// a decoder step's weights (~39 MB of int8 for t5-small) come from memory, and at 32 rows a
// block's loads take about as long as its multiply-adds. A tile asks for its share of the lines,
// one a step of its k loop (a branch or a loop there made GCC copy the accumulators every step);
// steps past the share ask for its last line again, which costs nothing.
struct Prefetch {
  const char* lines = nullptr;
  int64_t count = 1;  // at least 1
  void ask(int64_t step) const {
    _mm_prefetch(lines + 64 * std::min(step, count - 1), _MM_HINT_T1);
  }
};

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// acc + the dot products of x's u8 and w's s8 quads, in place. GCC 12 compiles
// _mm512_dpbusd_epi32 into a copy of the accumulator before each vpdpbusd and a copy back after
// (and, with 16 accumulators live, spills two to the stack): the loop ran at about 60% of the
// instruction's rate. Tied to its register here, the accumulator stays put.
__attribute__((target("avx512f,avx512vnni"))) inline __m512i dpbusd(__m512i acc, __m512i x,
                                                                    __m512i w) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
  return acc;
}

// MR input rows against one 64-column block (columns col0.., rows row0.. of the product),
// written to y through the layer's output step in registers.
template <int MR>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void u8s8_tile(
    const uint8_t* x, int64_t k, const int8_t* w, int64_t cols, const U8S8Output& o, int64_t row0,
    int64_t col0, float* y, int64_t ldy, Prefetch next) {
  __m512i acc[MR][4];
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_si512();
  }
  // The four weight vectors are loaded once per group of k: dpbusd takes them in registers, so
  // GCC cannot fold a load into every row's vpdpbusd (one load per instruction).
  for (int64_t g = 0; g < k / 4; ++g) {
    const int8_t* wg = w + g * kBlockCols * 4;
    __m512i w0 = _mm512_loadu_si512(wg), w1 = _mm512_loadu_si512(wg + 64),
            w2 = _mm512_loadu_si512(wg + 128), w3 = _mm512_loadu_si512(wg + 192);
    for (int r = 0; r < MR; ++r) {
      const __m512i xb = _mm512_set1_epi32(load_i32(x + r * k + 4 * g));
      acc[r][0] = dpbusd(acc[r][0], xb, w0);
      acc[r][1] = dpbusd(acc[r][1], xb, w1);
      acc[r][2] = dpbusd(acc[r][2], xb, w2);
      acc[r][3] = dpbusd(acc[r][3], xb, w3);
    }
    next.ask(g);
  }
  // y = (acc - 128 sums) * x_scale * scale + beta * y, as U8S8Output says: here, while the sums
  // are in registers and on every thread, not in a pass over an int32 buffer afterwards.
  for (int j = 0; j < 4; ++j) {
    const __mmask16 mask = column_mask(cols, j);
    const int64_t c = col0 + 16 * j;
    const __m512i shift =
        _mm512_mullo_epi32(_mm512_maskz_loadu_epi32(mask, o.sums + c), _mm512_set1_epi32(128));
    const __m512 scale = _mm512_maskz_loadu_ps(mask, o.scales + c);
    for (int r = 0; r < MR; ++r) {
      float* out = y + r * ldy + 16 * j;
      const __m512 v =
          _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(mask, _mm512_sub_epi32(acc[r][j], shift)),
                        _mm512_set1_ps(o.x_scales[row0 + r]));
      // beta != 0 rounds as GCC compiles the same formula in linear_packed's loop (one fused
      // multiply-add): both paths give the same floats.
      const __m512 result = o.beta == 0.0f
                                ? _mm512_mul_ps(v, scale)
                                : _mm512_fmadd_ps(v, scale,
                                                  _mm512_mul_ps(_mm512_set1_ps(o.beta),
                                                                _mm512_maskz_loadu_ps(mask, out)));
      _mm512_mask_storeu_ps(out, mask, result);
    }
  }
}

template <int MR>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void bf16_tile(
    const uint16_t* x, int64_t k, const uint16_t* w, int64_t cols, const float& beta, int64_t row0,
    int64_t col0, float* y, int64_t ldy, Prefetch next) {
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  // The four weight vectors are loaded once and pinned in registers (the empty asm): else GCC
  // folds each load into every row's instruction, one load per instruction, and the loop waits on
  // loads. (Pinning elements of a vector array instead made GCC spill the accumulators.)
  for (int64_t g = 0; g < k / 2; ++g) {
    const uint16_t* wg = w + g * kBlockCols * 2;
    __m512bh w0 = (__m512bh)_mm512_loadu_si512(wg), w1 = (__m512bh)_mm512_loadu_si512(wg + 32),
             w2 = (__m512bh)_mm512_loadu_si512(wg + 64), w3 = (__m512bh)_mm512_loadu_si512(wg + 96);
    __asm__("" : "+v"(w0), "+v"(w1), "+v"(w2), "+v"(w3));
    for (int r = 0; r < MR; ++r) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(load_i32(x + r * k + 2 * g));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], xb, w0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], xb, w1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], xb, w2);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], xb, w3);
    }
    next.ask(g);
  }
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < 4; ++j) {
      const __mmask16 mask = column_mask(cols, j);
      float* out = y + r * ldy + 16 * j;
      if (beta != 0.0f)
        acc[r][j] = _mm512_add_ps(
            acc[r][j], _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, out)));
      _mm512_mask_storeu_ps(out, mask, acc[r][j]);
    }
  }
}

// fp32: MR rows x 64 columns over kc values of k, weights from L1 (kc x 64 floats = 16 KiB);
// Adds beta * y (beta 1 for the k-blocks after the first; beta 0 reads nothing, y may hold NaN).
constexpr int kF32TileRows = 6;  // 6 x 4 accumulators, 4 weight registers, 1 broadcast: 29 of 32
constexpr int64_t kF32KBlock = 64;

template <int MR>
__attribute__((target("avx512f"))) void f32_tile(const float* x, int64_t ldx, int64_t kc,
                                                 const float* w, int64_t cols, float* y,
                                                 int64_t ldy, float beta) {
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < 4; ++j) {
      acc[r][j] = _mm512_setzero_ps();
      if (beta != 0.0f) {
        acc[r][j] =
            _mm512_mul_ps(_mm512_set1_ps(beta),
                          _mm512_maskz_loadu_ps(column_mask(cols, j), y + r * ldy + 16 * j));
      }
    }
  }
  for (int64_t i = 0; i < kc; ++i) {  // as in bf16_tile
    const float* wi = w + i * kBlockCols;
    __m512 w0 = _mm512_loadu_ps(wi), w1 = _mm512_loadu_ps(wi + 16), w2 = _mm512_loadu_ps(wi + 32),
           w3 = _mm512_loadu_ps(wi + 48);
    __asm__("" : "+v"(w0), "+v"(w1), "+v"(w2), "+v"(w3));
    for (int r = 0; r < MR; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * ldx + i]);
      acc[r][0] = _mm512_fmadd_ps(xb, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(xb, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(xb, w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(xb, w3, acc[r][3]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < 4; ++j)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * j, column_mask(cols, j), acc[r][j]);
  }
}

// Threads split the column blocks; each block meets every input row while it is in L2, in tiles
// of up to kRows rows (tiles[rows - 1]).
template <typename X, typename W, typename Output, typename Tile, size_t kRows>
void packed_gemm(const X* x, int64_t m, int64_t k, const W* w, int64_t block_stride, int64_t n,
                 const Output& output, float* y, const std::array<Tile, kRows>& tiles) {
  const int64_t blocks = (n + kBlockCols - 1) / kBlockCols;
  constexpr auto tile_rows = static_cast<int64_t>(kRows);
  const int64_t tile_count = (m + tile_rows - 1) / tile_rows;
  const int64_t block_lines = block_stride * static_cast<int64_t>(sizeof(W)) / 64;
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (n * k >= (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t cols = std::min(kBlockCols, n - b * kBlockCols);
    // The tiles share out the next block's lines (after the last block, this one's first line).
    const int64_t lines = b + 1 < blocks ? block_lines : 0;
    const char* next =
        reinterpret_cast<const char*>(w + std::min(b + 1, blocks - 1) * block_stride);
    for (int64_t t = 0; t < tile_count; ++t) {
      const int64_t r = t * tile_rows;
      const int64_t rows = std::min(tile_rows, m - r);
      const int64_t first = t * lines / tile_count, end = (t + 1) * lines / tile_count;
      tiles[rows - 1](x + r * k, k, w + b * block_stride, cols, output, r, b * kBlockCols,
                      y + r * n + b * kBlockCols, n,
                      Prefetch{next + 64 * first, std::max<int64_t>(end - first, 1)});
    }
  }
}

using U8S8Tile = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, const U8S8Output&,
                          int64_t, int64_t, float*, int64_t, Prefetch);
using Bf16Tile = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, const float&, int64_t,
                          int64_t, float*, int64_t, Prefetch);
// [rows - 1]: the tile for every row count up to the type's tile rows.
template <size_t... I>
constexpr std::array<U8S8Tile, sizeof...(I)> u8s8_tiles(std::index_sequence<I...>) {
  return {u8s8_tile<static_cast<int>(I) + 1>...};
}
template <size_t... I>
constexpr std::array<Bf16Tile, sizeof...(I)> bf16_tiles(std::index_sequence<I...>) {
  return {bf16_tile<static_cast<int>(I) + 1>...};
}
using F32Tile = void (*)(const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t,
                         float);
template <size_t... I>
constexpr std::array<F32Tile, sizeof...(I)> f32_tiles(std::index_sequence<I...>) {
  return {f32_tile<static_cast<int>(I) + 1>...};
}
constexpr auto kF32Tiles = f32_tiles(std::make_index_sequence<kF32TileRows>());
constexpr auto kU8S8Tiles = u8s8_tiles(std::make_index_sequence<kU8S8TileRows>());
constexpr auto kBf16Tiles = bf16_tiles(std::make_index_sequence<kBf16TileRows>());

}  // namespace

void packed_gemm_u8s8(const uint8_t* x, int64_t m, int64_t k, const int8_t* w, int64_t block_stride,
                      int64_t n, const U8S8Output& output, float* y) {
  packed_gemm(x, m, k, w, block_stride, n, output, y, kU8S8Tiles);
}

void packed_gemm_bf16(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w,
                      int64_t block_stride, int64_t n, float beta, float* y) {
  packed_gemm(x, m, k, w, block_stride, n, beta, y, kBf16Tiles);
}

void pack_f32(const float* w, int64_t n, int64_t k, float* packed) {
  for (int64_t b = 0; b * kBlockCols < n; ++b) {
    float* block = packed + b * kBlockCols * k;
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t c = 0; c < kBlockCols; ++c) {
        const int64_t j = b * kBlockCols + c;
        block[i * kBlockCols + c] = j < n ? w[j * k + i] : 0.0f;
      }
    }
  }
}

bool packed_gemm_f32_runs() {
  return __builtin_cpu_supports("avx512f");
}

void packed_gemm_f32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float beta,
                     float* y) {
  // Each thread takes whole column blocks; within one, k is cut into L1-sized pieces and every
  // input row meets a piece before the next is loaded.
  const int64_t blocks = (n + kBlockCols - 1) / kBlockCols;
#pragma omp parallel for num_threads(num_threads()) schedule(static) if (n * k >= (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t cols = std::min(kBlockCols, n - b * kBlockCols);
    const float* wb = w + b * kBlockCols * k;
    for (int64_t i0 = 0; i0 < k; i0 += kF32KBlock) {
      const int64_t kc = std::min(kF32KBlock, k - i0);
      for (int64_t r = 0; r < m; r += kF32TileRows) {
        const int64_t rows = std::min<int64_t>(kF32TileRows, m - r);
        kF32Tiles[rows - 1](x + r * k + i0, k, kc, wb + i0 * kBlockCols, cols,
                            y + r * n + b * kBlockCols, n, i0 > 0 ? 1.0f : beta);
      }
    }
  }
}

}  // namespace seqpipe::engine::cpu
