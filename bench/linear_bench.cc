// linear_bench: the decoder's linear layer, y = x W^T, on OpenBLAS and on the engine's
// small-batch kernel, side by side in one run, for the row counts a decoder step sees.
// The ratio between the two picks ops::linear's dispatch (src/ops.cc).
//   linear_bench [--threads N] [--cold] [--compute-types] [--qkv]
// --cold cycles through copies of each weight (256 MiB of them in fp32, a quarter of that in int8),
// so every call streams its weights from DRAM as a decoder step does (the default measures
// weights that stay in cache); with --compute-types too.
// --compute-types: fp32 (ops::linear's pick) against bf16 and int8 on oneDNN's packed weights and
// on the engine's portable kernels, per shape, through ops::linear as the layers call it (int8 at
// every row count but on AMX, and bf16 up to cpu::kPackedGemmMaxRows rows, is the engine's
// packed_gemm); "exec" columns: the same packed weights through oneDNN's matmul execute, for the
// comparison.
// --qkv: a self-attention's q, k and v as three GEMMs against one over their concatenated
// weights (what the encoder and the decoder run), for the encoder's row counts, in each CPU
// compute type, as process CPU time; the two alternate call by call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/blas.h"
#include "cpu/kernels.h"
#include "cpu/onednn.h"
#include "cpu/packed_gemm.h"
#include "ops.h"
#include "seqpipe/cli/cli.h"

namespace {
using Clock = std::chrono::steady_clock;

template <typename F>
double best_us(F&& f, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return best;
}
}  // namespace

// How many copies of an [n, k] weight --cold cycles through: 256 MiB of fp32, at least 2.
int64_t cold_copies(bool cold, int64_t n, int64_t k) {
  return cold ? std::max<int64_t>(2, (int64_t(256) << 20) / (n * k * 4)) : 1;
}

// Microseconds per call of each compute type's linear, weights in cache (cold: from memory).
int compute_types(bool cold) {
  using namespace seqpipe::engine;
  struct Column {
    const char* name;
    ComputeType type;
    CpuKernels kernels;
  };
  const Column columns[] = {{"f32", ComputeType::kFloat32, CpuKernels::kBest},
                            {"bf16 dnnl", ComputeType::kBFloat16, CpuKernels::kBest},
                            {"i8 dnnl", ComputeType::kInt8, CpuKernels::kBest},
                            {"bf16 own", ComputeType::kBFloat16, CpuKernels::kPortable},
                            {"i8 own", ComputeType::kInt8, CpuKernels::kPortable}};
  std::printf("%-16s %4s", "shape [n x k]", "m");
  for (const Column& c : columns) std::printf(" %10s", c.name);
  std::printf(" %10s %10s", "bf16 exec", "i8 exec");
  std::printf("   (us per call; f32 / i8 dnnl)\n");
  for (auto [n, k] : {std::pair<int64_t, int64_t>{256, 256},
                      {1024, 256},
                      {256, 1024},
                      {512, 512},
                      {2048, 512},
                      {512, 2048},
                      {32128, 512}}) {
    Tensor w = Tensor::empty({n, k});
    for (int64_t i = 0; i < w.numel(); ++i) w.data()[i] = float(i % 13) * 0.01f - 0.06f;
    // copies[column][copy]: each prepared apart, so each has its own memory.
    const int64_t copies = cold_copies(cold, n, k);
    std::vector<std::vector<LinearWeight>> weights(std::size(columns));
    for (size_t c = 0; c < std::size(columns); ++c) {
      for (int64_t i = 0; i < copies; ++i) {
        weights[c].push_back(ops::prepare_linear(
            w, {.compute_type = columns[c].type, .cpu_kernels = columns[c].kernels}));
      }
    }
    // bf16 dnnl's and i8 dnnl's packed weights through oneDNN's execute (block_stride 0), not
    // packed_gemm.
    std::vector<std::vector<cpu::OneDnnWeight>> execs(std::size(columns));
    for (size_t c : {size_t{1}, size_t{2}}) {
      for (const LinearWeight& lw : weights[c]) {
        if (!lw.packed) continue;
        execs[c].push_back(static_cast<const cpu::OneDnnWeight&>(*lw.packed));
        execs[c].back().block_stride = 0;
      }
    }
    int64_t next = 0;
    auto weight = [&](size_t c) -> const LinearWeight& { return weights[c][next++ % copies]; };
    Tensor x = Tensor::empty({288, k}), y = Tensor::empty({288, n});
    for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = float(i % 7) * 0.1f - 0.3f;
    for (int64_t m : {1, 4, 8, 16, 32, 64, 128, 288}) {
      std::printf("[%5ld x %4ld] %4ld", long(n), long(k), long(m));
      std::vector<double> us;
      for (size_t c = 0; c < std::size(columns); ++c) {
        us.push_back(best_us([&] { ops::linear(x.rows(0, m), weight(c), y.rows(0, m)); }, 20));
        std::printf(" %10.1f", us.back());
      }
      for (size_t c : {size_t{1}, size_t{2}}) {  // bf16 dnnl, i8 dnnl through oneDNN's execute
        if (execs[c].empty()) {
          std::printf(" %10s", "-");
          continue;
        }
        std::printf(" %10.1f", best_us(
                                   [&] {
                                     const int64_t i = next++ % copies;
                                     cpu::linear_packed(x.data(), m, execs[c][i],
                                                        weights[c][i].scales.data(), 0.0f,
                                                        y.data());
                                   },
                                   20));
      }
      std::printf("   %5.2fx\n", us[0] / us[2]);
    }
  }
  return 0;
}

// The process's CPU time of one call of f, in microseconds: unlike the wall time, it leaves out
// the time other processes held the cores, which on a loaded 2-core machine is most of a 5 ms call.
template <typename F>
double cpu_us(F&& f) {
  timespec t0{}, t1{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
  f();
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
  return double(t1.tv_sec - t0.tv_sec) * 1e6 + double(t1.tv_nsec - t0.tv_nsec) / 1e3;
}

// The least process CPU time of three [inner x d] GEMMs and of one [3 inner x d] GEMM (t5-small:
// 512 x 512), alternating, at the encoder's rows for batches of 1, 8 and 32 nine-token inputs.
int fused_qkv() {
  using namespace seqpipe::engine;
  const int64_t d = 512, inner = 512, reps = 50;
  Tensor w = Tensor::empty({3 * inner, d});
  for (int64_t i = 0; i < w.numel(); ++i) w.data()[i] = float(i % 13) * 0.01f - 0.06f;
  Tensor x = Tensor::empty({288, d}), y = Tensor::empty({288, 3 * inner});
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = float(i % 7) * 0.1f - 0.3f;
  std::printf("%-14s %4s %12s %12s %7s\n", "type", "m", "3 GEMMs us", "1 GEMM us", "ratio");
  for (const auto& [name, type, kernels] :
       {std::tuple{"f32", ComputeType::kFloat32, CpuKernels::kBest},
        std::tuple{"f32 portable", ComputeType::kFloat32, CpuKernels::kPortable},
        std::tuple{"bf16", ComputeType::kBFloat16, CpuKernels::kBest},
        std::tuple{"i8", ComputeType::kInt8, CpuKernels::kBest}}) {
    const ModelOptions options{.compute_type = type, .cpu_kernels = kernels};
    const LinearWeight fused = ops::prepare_linear(w, options);
    std::vector<LinearWeight> parts;
    std::vector<Tensor> outs;
    for (int64_t p = 0; p < 3; ++p) {
      Tensor part = Tensor::empty({inner, d});
      std::copy(w.row(p * inner), w.row((p + 1) * inner), part.data());
      parts.push_back(ops::prepare_linear(part, options));
      outs.push_back(Tensor::empty({288, inner}));
    }
    for (const int64_t m : {9, 72, 288}) {
      double three = 1e30, one = 1e30;
      for (int r = 0; r < reps; ++r) {
        three =
            std::min(three, cpu_us([&] {
                       for (int64_t p = 0; p < 3; ++p)
                         ops::linear(x.rows(0, m), parts[size_t(p)], outs[size_t(p)].rows(0, m));
                     }));
        one = std::min(one, cpu_us([&] { ops::linear(x.rows(0, m), fused, y.rows(0, m)); }));
      }
      std::printf("%-14s %4ld %12.1f %12.1f %6.2fx\n", name, long(m), three, one, three / one);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  constexpr const char* kUsage =
      "usage: linear_bench [--threads N] [--cold] [--compute-types] [--qkv]\n";
  int threads = 2;
  bool cold = false, types = false, qkv = false, help = false;
  try {
    CLI::App app;
    seqpipe::cli::set_up(app);
    app.add_flag("-h,--help", help);
    seqpipe::cli::add_number(app, "--threads", threads);
    app.add_flag("--cold", cold);
    app.add_flag("--compute-types", types);
    app.add_flag("--qkv", qkv);
    const std::vector<std::string> unknown = seqpipe::cli::parse(app, argc, argv);
    if (help) return std::fputs(kUsage, stdout), 0;
    if (!unknown.empty())
      throw seqpipe::cli::UsageError("unknown argument '" + unknown.front() + "'");
    if (threads < 1) throw seqpipe::cli::UsageError("--threads must be at least 1");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linear_bench: %s\n%s", e.what(), kUsage);
    return 2;
  }
  using namespace seqpipe::engine;
  ops::set_num_threads(Device::kCpu, threads);
  if (types) return compute_types(cold);
  if (qkv) return fused_qkv();
  std::printf("%-16s %4s %10s %10s %10s %8s %12s %12s\n", "shape [n x k]", "m", "blas us",
              "tiled us", "packed us", "ratio", "tiled GFLOP/s", "packed GFLOP/s");
  for (auto [n, k] :
       {std::pair<int64_t, int64_t>{512, 512}, {2048, 512}, {512, 2048}, {32128, 512}}) {
    const int64_t copies = cold_copies(cold, n, k);
    std::vector<float> w(copies * n * k), x(288 * k), y(288 * n);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 13) * 0.01f;
    int64_t next = 0;
    auto weights = [&] { return w.data() + (next++ % copies) * n * k; };
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) * 0.1f;
    std::vector<float> packed(copies * cpu::packed_f32_size(n, k));
    for (int64_t c = 0; c < copies; ++c)
      cpu::pack_f32(w.data() + c * n * k, n, k, packed.data() + c * cpu::packed_f32_size(n, k));
    auto packed_weights = [&] {
      return packed.data() + (next++ % copies) * cpu::packed_f32_size(n, k);
    };
    for (int64_t m : {1, 2, 4, 8, 16, 32, 64, 128, 288}) {
      const int reps = 30;
      double b = best_us(
          [&] { blas::gemm(true, m, n, k, 1.0f, x.data(), k, weights(), k, 0.0f, y.data(), n); },
          reps);
      double t =
          best_us([&] { cpu::linear_tiled(x.data(), m, weights(), n, k, 0.0f, y.data()); }, reps);
      double p = best_us(
          [&] { cpu::packed_gemm_f32(x.data(), m, k, packed_weights(), n, 0.0f, y.data()); }, reps);
      std::printf("[%5ld x %4ld] %4ld %10.1f %10.1f %10.1f %8.2f %12.1f %12.1f\n", long(n), long(k),
                  long(m), b, t, p, b / std::min(t, p), 2.0 * m * n * k / t / 1e3,
                  2.0 * m * n * k / p / 1e3);
    }
  }
  return 0;
}
