// The machine's limits engine_bench sets its figures against (machine_limits.h).
#include "machine_limits.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "cpu/blas.h"  // the fp32 GEMM peak, measured with the BLAS

namespace seqpipe::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Runs loop(iterations) on `threads` threads at once, three times: the best rate of
// `ops_per_iteration` operations per second per thread, in G/s over all threads.
template <typename Loop>
double peak_rate(int threads, double ops_per_iteration, Loop loop) {
  constexpr long kIters = 20'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::thread> pool;
    auto t0 = Clock::now();
    for (int t = 0; t < threads; ++t) pool.emplace_back([&] { loop(kIters); });
    for (auto& th : pool) th.join();
    const double ops = ops_per_iteration * double(kIters) * threads;
    best = std::max(best, ops / (ms_since(t0) / 1000.0) / 1e9);
  }
  return best;
}

}  // namespace

// Read bandwidth with `threads` threads, reading the same `bytes` over and over (as decoder steps
// re-read the same weights).
double read_bandwidth_gbs(int threads, size_t bytes) {
  const size_t n =
      bytes / sizeof(float) / 64 / static_cast<size_t>(threads) * 64 * static_cast<size_t>(threads);
  std::vector<float> buf(n, 1.0f);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<std::thread> pool;
    std::vector<float> sums(static_cast<size_t>(threads));
    auto t0 = Clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t lo = n / threads * t, hi = n / threads * (t + 1);
        float acc[64] = {};  // 4 independent vector chains: bound by memory, not add latency
        for (size_t i = lo; i < hi; i += 64) {
          for (int j = 0; j < 64; ++j) acc[j] += buf[i + j];
        }
        float s = 0;
        for (float a : acc) s += a;
        sums[static_cast<size_t>(t)] = s;
      });
    }
    for (auto& th : pool) th.join();
    const double sec = ms_since(t0) / 1000.0;
    best = std::max(best, double(n * sizeof(float)) / sec / 1e9);
  }
  return best;
}

// The FMA units' fp32 peak: independent vector FMA chains on every thread, nothing loaded.
double fma_peak_gflops(int threads) {
  typedef float V __attribute__((vector_size(64)));
  constexpr int kChains = 12;  // more independent chains than FMA latency x FMA ports
  return peak_rate(threads, 2.0 * 16 * kChains, [](long iterations) {
    V acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = V{} + float(c);
    V a = V{} + 0.999f, b = V{} + 0.001f;
#ifdef __AVX512F__
    __asm__("" : "+v"(a), "+v"(b));
#else  // a 64-byte vector fits no register below AVX-512 (-march=x86-64-v3): opaque via memory
    __asm__("" : "+m"(a), "+m"(b));
#endif
    for (long i = 0; i < iterations; ++i) {
      for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
    }
    for (int c = 1; c < kChains; ++c) acc[0] += acc[c];
    __asm__("" : : "m"(acc[0]));
  });
}

// The int8 peak of the instruction the engine's int8 GEMM runs on (AVX512_VNNI's 512-bit
// vpdpbusd, 64 multiply-adds each), in G multiply-adds/s; 0 without it. Written in asm: GCC 12
// wraps each _mm512_dpbusd_epi32 in register copies, which would measure the copies.
double vnni_peak_gmacs(int threads) {
#ifdef __AVX512VNNI__
  return peak_rate(threads, 64.0 * 12, [](long iterations) {
    __asm__ volatile(
        "vpxord %%zmm30, %%zmm30, %%zmm30\n"
        "vpxord %%zmm31, %%zmm31, %%zmm31\n"
        "1:\n"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n vpdpbusd %%zmm30, %%zmm31, %%zmm1\n"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm2\n vpdpbusd %%zmm30, %%zmm31, %%zmm3\n"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm4\n vpdpbusd %%zmm30, %%zmm31, %%zmm5\n"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm6\n vpdpbusd %%zmm30, %%zmm31, %%zmm7\n"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm8\n vpdpbusd %%zmm30, %%zmm31, %%zmm9\n"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm10\n vpdpbusd %%zmm30, %%zmm31, %%zmm11\n"
        "dec %0\n"
        "jnz 1b\n"
        : "+r"(iterations)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
          "xmm11", "xmm30", "xmm31");
  });
#else
  (void)threads;
  return 0;
#endif
}

// Achievable fp32 GEMM throughput: the BLAS on a large square product.
double gemm_peak_gflops() {
  const int64_t n = 1536;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = Clock::now();
    engine::blas::gemm(true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    best = std::max(best, 2.0 * n * n * n / (ms_since(t0) / 1000.0) / 1e9);
  }
  return best;
}

}  // namespace seqpipe::bench
