#pragma once
// This machine's limits, measured: what engine_bench's figures are a fraction of.
#include <cstddef>

namespace seqpipe::bench {

// Read bandwidth in GB/s with `threads` threads, reading the same `bytes` over and over (as
// decoder steps re-read the same weights).
double read_bandwidth_gbs(int threads, size_t bytes);

// The FMA units' fp32 peak in GFLOP/s: independent vector FMA chains on every thread.
double fma_peak_gflops(int threads);

// The int8 peak of AVX512_VNNI's 512-bit vpdpbusd in G multiply-adds/s; 0 without it.
double vnni_peak_gmacs(int threads);

// Achievable fp32 GEMM throughput in GFLOP/s: the BLAS on a large square product.
double gemm_peak_gflops();

}  // namespace seqpipe::bench
