#include "cpu/kernels.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/blas.h"

namespace seqpipe::engine::cpu {

namespace {
const int g_max_threads = omp_get_max_threads();
std::atomic<int> g_threads{g_max_threads};  // until ModelOptions.threads says otherwise

// 16 floats: one AVX-512 register (two AVX2 registers when built for such a machine), read and
// written in place of floats (may_alias) by load16 / store16.
typedef float Vec16 __attribute__((vector_size(64), aligned(4), may_alias));

// Through a pointer, not memcpy: GCC 12 copies 64 bytes in its preferred vector width, which
// -march=native sets to 256 bits on Intel's AVX-512 cores, and then builds the register on the
// stack (two 32-byte stores and a 64-byte load that waits for them) at every load and store.
inline Vec16 load16(const float* p) {
  return *reinterpret_cast<const Vec16*>(p);
}
inline void store16(float* p, Vec16 v) {
  *reinterpret_cast<Vec16*>(p) = v;
}

typedef float Vec8 __attribute__((vector_size(32)));
typedef float Vec4 __attribute__((vector_size(16)));

// Horizontal sum as a halving tree (4 adds deep, not 15): it runs once per output element.
inline float sum16(Vec16 v) {
  const Vec8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                 __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const Vec4 b =
      __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

// Keeps a loaded vector in a register (an empty asm the compiler cannot see through). Only
// AVX-512 holds 16 floats in one register; below it (-march=x86-64-v3, the portable build) the
// constraint is impossible, and GCC splits the vector itself.
inline void pin_in_register(Vec16& v) {
#ifdef __AVX512F__
  __asm__("" : "+v"(v));
#else
  (void)v;
#endif
}

// A register tile: MR input rows x NR weight rows, 16 lanes of k at a time. Each step loads
// MR + NR vectors for MR * NR FMAs, so the FMA units, not the loads, set the pace.
template <int MR, int NR>
void dot_tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* out,
              int64_t ldo) {
  Vec16 acc[MR][NR];
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < NR; ++j) acc[r][j] = Vec16{};
  }
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    Vec16 wv[NR], xv[MR];
    // The empty asm pins each loaded vector in a register: without it GCC 12 reloads the
    // weights for every FMA (2 loads per FMA, load-bound instead of FMA-bound).
    for (int j = 0; j < NR; ++j) {
      // Weights come from DRAM once per step: fetch the next block's rows (the same thread's
      // next work under a static schedule) while this block computes.
      __builtin_prefetch(w + (j + NR) * ldw + i);
      wv[j] = load16(w + j * ldw + i);
      pin_in_register(wv[j]);
    }
    for (int r = 0; r < MR; ++r) {
      xv[r] = load16(x + r * ldx + i);
      pin_in_register(xv[r]);
    }
    for (int r = 0; r < MR; ++r) {
      for (int j = 0; j < NR; ++j) acc[r][j] += xv[r] * wv[j];
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < NR; ++j) {
      float s = sum16(acc[r][j]);
      for (int64_t t = i; t < k; ++t) s += x[r * ldx + t] * w[j * ldw + t];
      out[r * ldo + j] = s;
    }
  }
}

constexpr int kTileRows = 4;  // MR
constexpr int kTileCols = 4;  // NR
using DotTile = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t);
// [MR - 1][NR == 4 ? 0 : 1]
constexpr DotTile kDotTiles[kTileRows][2] = {{dot_tile<1, 4>, dot_tile<1, 1>},
                                             {dot_tile<2, 4>, dot_tile<2, 1>},
                                             {dot_tile<3, 4>, dot_tile<3, 1>},
                                             {dot_tile<4, 4>, dot_tile<4, 1>}};
}  // namespace

void set_num_threads(int threads) {
  g_threads.store(std::clamp(threads, 1, g_max_threads));
}

int max_threads() {
  return g_max_threads;
}

int num_threads() {
  return g_threads.load(std::memory_order_relaxed);
}

namespace {
inline float bf16_to_float(uint16_t v) {
  return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
}
}  // namespace

void to_bf16(const float* x, int64_t n, uint16_t* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(x[i]);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    out[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded);
  }
}

void quantize_rows(const float* x, int64_t m, int64_t k, int8_t* q, float* scales) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    int8_t* qr = q + r * k;
    float amax = 0.0f;
#pragma omp simd reduction(max : amax)
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::abs(xr[i]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    scales[r] = amax / 127.0f;
#pragma omp simd
    for (int64_t i = 0; i < k; ++i) qr[i] = static_cast<int8_t>(std::nearbyint(xr[i] * inv));
  }
}

void linear_bf16(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k, float beta,
                 float* y) {
  // Each weight row meets every input row while it is in L1; threads split the weight rows.
#pragma omp parallel for num_threads(g_threads.load(std::memory_order_relaxed)) \
    schedule(static) if (n * k >= (1 << 16))
  for (int64_t j = 0; j < n; ++j) {
    const uint16_t* wr = w + j * k;
    for (int64_t r = 0; r < m; ++r) {
      const float* xr = x + r * k;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < k; ++i) sum += xr[i] * bf16_to_float(wr[i]);
      float& out = y[r * n + j];
      out = beta == 0.0f ? sum : sum + beta * out;
    }
  }
}

void linear_int8(const float* x, int64_t m, const int8_t* w, const float* scales, int64_t n,
                 int64_t k, float beta, float* y) {
  // Grows to the largest input seen, then a call allocates nothing.
  thread_local std::vector<int8_t> qx;
  thread_local std::vector<float> x_scales;
  if (qx.size() < static_cast<size_t>(m * k)) qx.resize(static_cast<size_t>(m * k));
  if (x_scales.size() < static_cast<size_t>(m)) x_scales.resize(static_cast<size_t>(m));
  quantize_rows(x, m, k, qx.data(), x_scales.data());
  const int8_t* q = qx.data();
  const float* sx = x_scales.data();
#pragma omp parallel for num_threads(g_threads.load(std::memory_order_relaxed)) \
    schedule(static) if (n * k >= (1 << 16))
  for (int64_t j = 0; j < n; ++j) {
    const int8_t* wr = w + j * k;
    for (int64_t r = 0; r < m; ++r) {
      const int8_t* qr = q + r * k;
      int32_t sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < k; ++i) sum += static_cast<int32_t>(qr[i]) * wr[i];
      const float v = static_cast<float>(sum) * sx[r] * scales[j];
      float& out = y[r * n + j];
      out = beta == 0.0f ? v : v + beta * out;
    }
  }
}

void linear_f32(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float beta,
                float* y) {
  if (m > 1 && m <= kTiledMaxRows) {
    linear_tiled(x, m, w, n, k, beta, y);
  } else {
    blas::gemm(true, m, n, k, 1.0f, x, k, w, k, beta, y, n);
  }
}

void linear_tiled(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float beta,
                  float* y) {
  constexpr int64_t kRowChunk = 128;  // 128 x 2048 floats = 1 MiB of inputs: an L2's worth
  if (m > kRowChunk) {
    for (int64_t r = 0; r < m; r += kRowChunk) {
      linear_tiled(x + r * k, std::min(kRowChunk, m - r), w, n, k, beta, y + r * n);
    }
    return;
  }
  // Blocks of kTileCols weight rows are split across threads; each block meets every input row
  // while it is in L1, so the weights are streamed from memory once per row chunk.
  const int64_t blocks = (n + kTileCols - 1) / kTileCols;
#pragma omp parallel for num_threads(g_threads.load(std::memory_order_relaxed)) \
    schedule(static) if (n * k >= (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * kTileCols;
    const int64_t cols = std::min<int64_t>(kTileCols, n - j0);
    float tile[kTileRows * kTileCols];
    for (int64_t r0 = 0; r0 < m; r0 += kTileRows) {
      const int64_t rows = std::min<int64_t>(kTileRows, m - r0);
      if (cols == kTileCols) {
        kDotTiles[rows - 1][0](x + r0 * k, k, w + j0 * k, k, k, tile, kTileCols);
      } else {
        for (int64_t c = 0; c < cols; ++c)
          kDotTiles[rows - 1][1](x + r0 * k, k, w + (j0 + c) * k, k, k, tile + c, kTileCols);
      }
      for (int64_t r = 0; r < rows; ++r) {
        float* out = y + (r0 + r) * n + j0;
        const float* t = tile + r * kTileCols;
        for (int64_t c = 0; c < cols; ++c) out[c] = beta == 0.0f ? t[c] : t[c] + beta * out[c];
      }
    }
  }
}

int64_t argmax(const float* row, int64_t n) {
  // One pass (a greedy step reads each sequence's 32k logits once): per lane its first maximum
  // and where it was, then the lanes' largest, the lowest index among equals. Indices fit in
  // int32 lanes: a vocabulary has fewer than 2^31 entries.
  typedef int32_t Index16 __attribute__((vector_size(64)));
  Vec16 best = Vec16{} - INFINITY;
  Index16 best_at{}, at{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16, at += 16) {
    const Vec16 v = load16(row + i);
    const auto greater = v > best;
    best = greater ? v : best;
    best_at = greater ? at : best_at;
  }
  float max_value = -INFINITY;
  int64_t max_at = -1;
  for (int lane = 0; lane < 16; ++lane) {
    if (best[lane] > max_value ||
        (best[lane] == max_value && max_at >= 0 && best_at[lane] < max_at)) {
      max_value = best[lane];
      max_at = best_at[lane];
    }
  }
  for (; i < n; ++i) {  // past every lane's index: only a larger value wins
    if (row[i] > max_value) {
      max_value = row[i];
      max_at = i;
    }
  }
  if (max_at >= 0) return max_at;
  for (i = 0; i < n; ++i) {  // nothing above -inf: the first -inf
    if (row[i] == -INFINITY) return i;
  }
  return 0;  // only NaNs: torch would return a NaN's index; any id is as good
}

void rms_norm(const float* x, int64_t m, int64_t d, const float* w, float eps, float scale,
              float* y) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < d; ++i) sum += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(d) + eps);
    if (scale == 1.0f) {
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) yr[i] = w[i] * (xr[i] * inv);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) yr[i] = w[i] * (xr[i] * inv) * scale;
    }
  }
}

void embedding(const int* ids, int64_t n, const float* table, int64_t d, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * d, table + static_cast<int64_t>(ids[i]) * d,
                static_cast<size_t>(d) * sizeof(float));
  }
}

void relu(float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

namespace {

typedef int32_t IVec16 __attribute__((vector_size(64)));

// exp(x) for 16 lanes: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by Cephes expf's polynomial (within
// 2 ulp of expf), 2^n built in the exponent bits. x is clamped to [-87, 88]: the results there
// are the float range's ends, which is all gelu needs.
inline Vec16 exp16(Vec16 x) {
  const Vec16 lo = Vec16{} - 87.0f, hi = Vec16{} + 88.0f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // Adding 1.5 * 2^23 rounds to the nearest integer and leaves it in the low mantissa bits.
  const Vec16 magic = Vec16{} + 12582912.0f;
  const Vec16 t = x * 1.44269504088896341f + magic;
  const Vec16 n = t - magic;
  const Vec16 r = x - n * 0.693359375f + n * 2.12194440e-4f;  // ln2 split in two (Cody-Waite)
  Vec16 p = Vec16{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const IVec16 exponent = ((IVec16)t - (IVec16)magic + 127) << 23;  // vector casts: bit copies
  return p * (Vec16)exponent;
}

// gelu_new(x) * b. 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)): one exp and one division.
inline Vec16 gated_gelu16(Vec16 x, Vec16 b) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const Vec16 u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return x / (1.0f + exp16(-2.0f * u)) * b;
}

// x[i] = exp(x[i] - shift), 16 lanes at a time, the last (or only) lanes through a padded
// vector too: attention's rows are often shorter than 16 keys; returns the sum (a softmax's
// denominator).
float exp_shifted(float* x, int64_t n, float shift) {
  Vec16 sum{};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const Vec16 e = exp16(load16(x + i) - shift);
    store16(x + i, e);
    sum += e;
  }
  float total = sum16(sum);
  if (i < n) {
    float rest[16] = {};
    const size_t bytes = static_cast<size_t>(n - i) * sizeof(float);
    std::memcpy(rest, x + i, bytes);
    const Vec16 e = exp16(load16(rest) - shift);
    store16(rest, e);
    std::memcpy(x + i, rest, bytes);
    for (int64_t t = 0; t < n - i; ++t) total += rest[t];
  }
  return total;
}

// a . b over n floats: four independent FMA chains per 64 lanes, one tree sum.
inline float dot(const float* a, const float* b, int64_t n) {
  Vec16 acc0{}, acc1{}, acc2{}, acc3{};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    acc0 += load16(a + i) * load16(b + i);
    acc1 += load16(a + i + 16) * load16(b + i + 16);
    acc2 += load16(a + i + 32) * load16(b + i + 32);
    acc3 += load16(a + i + 48) * load16(b + i + 48);
  }
  for (; i + 16 <= n; i += 16) acc0 += load16(a + i) * load16(b + i);
  float s = sum16((acc0 + acc1) + (acc2 + acc3));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// out[0, d) = scale * sum_j p[j] v[j * stride + 0, d), the sums kept in registers: 64 lanes
// (four chains) at a time.
inline void weighted_rows(const float* p, int64_t n, const float* v, int64_t stride, int64_t d,
                          float scale, float* out) {
  int64_t i = 0;
  for (; i + 64 <= d; i += 64) {
    Vec16 acc0{}, acc1{}, acc2{}, acc3{};
    for (int64_t j = 0; j < n; ++j) {
      const float* vj = v + j * stride + i;
      acc0 += p[j] * load16(vj);
      acc1 += p[j] * load16(vj + 16);
      acc2 += p[j] * load16(vj + 32);
      acc3 += p[j] * load16(vj + 48);
    }
    store16(out + i, acc0 * scale);
    store16(out + i + 16, acc1 * scale);
    store16(out + i + 32, acc2 * scale);
    store16(out + i + 48, acc3 * scale);
  }
  for (; i + 16 <= d; i += 16) {
    Vec16 acc{};
    for (int64_t j = 0; j < n; ++j) acc += p[j] * load16(v + j * stride + i);
    store16(out + i, acc * scale);
  }
  for (; i < d; ++i) {
    float s = 0.0f;
    for (int64_t j = 0; j < n; ++j) s += p[j] * v[j * stride + i];
    out[i] = s * scale;
  }
}

// Asks for rows [0, rows) x [0, width) of a row-major block (row stride `stride`) ahead of use.
inline void prefetch_rows(const float* p, int64_t rows, int64_t stride, int64_t width) {
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t i = 0; i < width; i += 16) __builtin_prefetch(p + j * stride + i);
  }
}

}  // namespace

void gated_gelu(float* a, const float* b, int64_t n) {
  // gelu_new (HF NewGELUActivation): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), 16 lanes at
  // a time: the scalar tanhf took a fifth of the bundled speller's time.
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    store16(a + i, gated_gelu16(load16(a + i), load16(b + i)));
  }
  if (i < n) {
    float xa[16] = {}, xb[16] = {};
    const size_t rest = static_cast<size_t>(n - i) * sizeof(float);
    std::memcpy(xa, a + i, rest);
    std::memcpy(xb, b + i, rest);
    const Vec16 y = gated_gelu16(load16(xa), load16(xb));
    std::memcpy(a + i, &y, rest);
  }
}

void attention(const ops::AttentionArgs& args) {
  const int64_t hd = args.head_dim;
  const int64_t width = args.num_heads * hd;
  const int64_t scratch_size = args.workspace.numel() / g_max_threads;
  // Sequences in parallel, each thread with its own scratch row; one head's work is too small
  // to split further. A decoder step's keys and values come from the KV cache in memory (the
  // step's weights pushed them out of the caches), one short block per sequence: each thread
  // asks for its next sequence's blocks while it computes this one (static schedule: its next
  // is s + threads). That took about 5% off attention's time at batch 32 on one thread.
  int64_t work = 0;
  for (int64_t s = 0; s < args.num_seqs; ++s) work += args.seqs[s].q.dim(0) * args.seqs[s].k.dim(0);
#pragma omp parallel num_threads( \
    g_threads.load(std::memory_order_relaxed)) if (args.num_seqs > 1 && work * width >= (1 << 15))
  {
    const int64_t threads = omp_get_num_threads();
    float* scores =
        args.workspace.data() + static_cast<int64_t>(omp_get_thread_num()) * scratch_size;
#pragma omp for schedule(static, 1)
    for (int64_t s = 0; s < args.num_seqs; ++s) {
      if (s + threads < args.num_seqs) {
        const ops::AttentionSequence& next = args.seqs[s + threads];
        prefetch_rows(next.k.data(), next.k.dim(0), next.kv_row_stride(), width);
        prefetch_rows(next.v.data(), next.v.dim(0), next.kv_row_stride(), width);
      }
      const ops::AttentionSequence& seq = args.seqs[s];
      if (seq.new_k.defined()) {
        const size_t bytes = static_cast<size_t>(seq.new_k.bytes());
        std::memcpy(seq.k.row(seq.q_pos), seq.new_k.data(), bytes);
        std::memcpy(seq.v.row(seq.q_pos), seq.new_v.data(), bytes);
      }
      const int64_t k_rows = seq.k.dim(0);
      const int64_t q_stride = seq.q_row_stride(), kv_stride = seq.kv_row_stride();
      const int64_t out_stride = seq.out.row_size();
      const float *q_rows = seq.q.data(), *k_rows_data = seq.k.data(), *v_rows = seq.v.data();
      float* out_rows = seq.out.data();
      for (int64_t r = 0; r < seq.q.dim(0); ++r) {
        const int64_t qpos = seq.q_pos + r;
        const int64_t kend = args.causal ? std::min(k_rows, qpos + 1) : k_rows;
        for (int64_t h = 0; h < args.num_heads; ++h) {
          const float* q = q_rows + r * q_stride + h * hd;
          const float* k = k_rows_data + h * hd;
          float max_score = -INFINITY;
          for (int64_t j = 0; j < kend; ++j) {
            float score = dot(q, k + j * kv_stride, hd);
            if (args.bias) {
              const int64_t max_distance = args.bias->max_distance;
              const int64_t rel = std::clamp(j - qpos, -max_distance, max_distance);
              score += args.bias->table.row(h)[max_distance + rel];
            }
            scores[j] = score;
            max_score = score > max_score ? score : max_score;
          }
          const float inv_total = 1.0f / exp_shifted(scores, kend, max_score);
          weighted_rows(scores, kend, v_rows + h * hd, kv_stride, hd, inv_total,
                        out_rows + r * out_stride + h * hd);
        }
      }
    }
  }
}

}  // namespace seqpipe::engine::cpu
