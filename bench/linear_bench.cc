// linear_bench: the decoder's linear layer, y = x W^T, on OpenBLAS and on the engine's
// small-batch kernel, side by side in one run, for the row counts a decoder step sees.
// The ratio between the two picks ops::linear's dispatch (src/ops.cc).
//   linear_bench [--threads N] [--cold] [--compute-types]
// --cold cycles through copies of each weight (256 MiB of them in fp32, a quarter of that in int8),
// so every call streams its weights from DRAM as a decoder step does (the default measures
// weights that stay in cache); with --compute-types too.
// --compute-types: fp32 (ops::linear's pick) against bf16 and int8 on oneDNN's packed weights and
// on the engine's portable kernels, per shape, through ops::linear as the layers call it (int8 at
// every row count but on AMX, and bf16 up to cpu::kPackedGemmMaxRows rows, is the engine's
// packed_gemm); "exec" columns: the same packed weights through oneDNN's matmul execute, for the
// comparison.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
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

int main(int argc, char** argv) {
  constexpr const char* kUsage = "usage: linear_bench [--threads N] [--cold] [--compute-types]\n";
  int threads = 2;
  bool cold = false, types = false, help = false;
  try {
    CLI::App app;
    seqpipe::cli::set_up(app);
    app.add_flag("-h,--help", help);
    seqpipe::cli::add_number(app, "--threads", threads);
    app.add_flag("--cold", cold);
    app.add_flag("--compute-types", types);
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
