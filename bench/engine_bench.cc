// engine_bench: the seed article's T5 workload on the CPU engine.
//   9 input tokens (eos included), exactly 11 new tokens (min = max = 11), greedy, fp32.
// Prints batch-1 generate latency (median, p99), encoder-only latency, decoder step time at
// batch 1/8/32, sequences/s at batch 8/32, peak RSS and KV-cache bytes, heap allocations inside
// the decode loop, the machine's measured read bandwidth, fp32 peak and int8 (vpdpbusd) peak,
// each figure as a fraction of its limit, and (--profile) where a generate of --profile-batch N
// (default 1) spends its time, per op.
// With --text, it times that one text instead (tokenized with DIR/spiece.model), greedy until
// eos, batch 1: the bundled speller's serving case.
//
//   seqpipe-mkmodel --preset t5-small --seed 0 --out /tmp/t5-small
//   engine_bench --model /tmp/t5-small --threads 2 [--runs 50] [--profile]
//   engine_bench --model models/speller-t5 --threads 1 --text "supkort wimldlife ovt furwn orgy"
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "allocation_counter.h"  // the decode loop makes no allocation
#include "machine_limits.h"
#include "seqpipe/cli/cli.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/engine/encoder.h"
#include "seqpipe/engine/profiler.h"
#include "seqpipe/engine/tokenizer.h"

namespace {

using namespace seqpipe::engine;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// CPU time of the whole process: on a shared machine, what a single-threaded run costs is better
// read from it than from the wall clock (which counts the time other processes ran).
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

constexpr int kNewTokens = 11;

std::vector<int> input(int i, int64_t vocab) {  // 8 tokens + eos = 9
  std::vector<int> ids;
  for (int t = 0; t < 8; ++t)
    ids.push_back(static_cast<int>(100 + (i * 37 + t * 11) % (vocab - 200)));
  ids.push_back(1);
  return ids;
}

// Runs one batch through encode + 11 greedy steps on a persistent Generator (as a server does).
struct BatchTiming {
  double encode_ms = 0, total_ms = 0;
  std::vector<double> step_ms;
  uint64_t decode_loop_allocations = 0;
};

BatchTiming run_batch(const std::shared_ptr<const T5Model>& model, Encoder& encoder, Generator& gen,
                      int batch, std::vector<Generator::Finished>& finished) {
  std::vector<std::vector<int>> inputs;
  for (int i = 0; i < batch; ++i) inputs.push_back(input(i, model->config().vocab_size));
  const DecodingOptions o{.max_new_tokens = kNewTokens, .min_new_tokens = kNewTokens};
  BatchTiming t;
  t.step_ms.reserve(kNewTokens + 1);  // so the timing itself allocates nothing inside the loop
  finished.clear();
  auto t0 = Clock::now();
  EncoderOutput enc = encoder.encode(inputs);
  synchronize(model->device());  // a GPU's encoder only queued its work
  t.encode_ms = ms_since(t0);
  gen.add(enc, std::vector<DecodingOptions>(static_cast<size_t>(batch), o));
  // Steps after the first: the first step of a sequence follows its add(); both are steady state.
  while (gen.active() > 0) {
    const uint64_t a0 = seqpipe::bench::allocations();
    auto s0 = Clock::now();
    const bool last = gen.active() > 0 && t.step_ms.size() + 1 == static_cast<size_t>(kNewTokens);
    gen.step(finished);
    const uint64_t a1 = seqpipe::bench::allocations();
    t.step_ms.push_back(ms_since(s0));
    if (!last) t.decode_loop_allocations += a1 - a0;  // the final step builds the results
  }
  t.total_ms = ms_since(t0);
  return t;
}

// What it is doing now, on stderr (unbuffered): a full run takes minutes, and the report on
// stdout comes section by section.
void progress(const char* what) {
  std::fprintf(stderr, "engine_bench: %s...\n", what);
}

// Per op: its host time (on a GPU, launch plus the wait for the device, since the profiler
// waits after every op) and, on a GPU, its kernels' device time (CUDA events); then, on a GPU,
// every kernel's device time by name, the largest first.
void print_profile(int runs, double total_ms) {
  auto stats = profiler::snapshot();
  const bool device = std::any_of(stats.begin(), stats.end(),
                                  [](const profiler::OpStats& s) { return s.device_nanoseconds; });
  double accounted = 0;
  for (size_t i = 0; i < profiler::kNumOps; ++i) {
    const double ms = stats[i].nanoseconds / 1e6 / runs;
    accounted += ms;
    std::printf("%-24s %8.3f ms/generate %5.1f%%  (%lu calls/generate)",
                std::string(profiler::op_name(static_cast<profiler::Op>(i))).c_str(), ms,
                100 * ms / (total_ms / runs), (unsigned long)(stats[i].calls / runs));
    if (device) std::printf("  device %8.3f ms", stats[i].device_nanoseconds / 1e6 / runs);
    std::printf("\n");
  }
  std::printf("%-24s %8.3f ms/generate %5.1f%%\n", "other", total_ms / runs - accounted,
              100 * (total_ms / runs - accounted) / (total_ms / runs));
  std::vector<profiler::KernelStats> kernels = profiler::kernel_snapshot();
  if (kernels.empty()) return;
  std::sort(kernels.begin(), kernels.end(),
            [](const auto& a, const auto& b) { return a.nanoseconds > b.nanoseconds; });
  double device_ms = 0;
  for (const auto& k : kernels) device_ms += k.nanoseconds / 1e6 / runs;
  std::printf("\n== per-kernel device time (CUDA events, no graphs), %.3f ms/generate ==\n",
              device_ms);
  std::printf("%-32s %10s %7s %9s %11s\n", "kernel", "ms/gen", "share", "launches", "us/launch");
  for (const auto& k : kernels) {
    const double ms = k.nanoseconds / 1e6 / runs;
    std::printf("%-32s %10.3f %6.1f%% %9lu %11.2f\n", k.name.c_str(), ms, 100 * ms / device_ms,
                (unsigned long)(k.launches / runs), k.nanoseconds / 1e3 / double(k.launches));
  }
}

// --profile: `runs` generates of `batch` sequences with the profiler on (on a GPU every op is
// issued as it comes and waited for, no graph), then the per-op and per-kernel tables.
int run_profile(const std::shared_ptr<const T5Model>& model, Encoder& encoder, Generator& gen,
                int batch, int runs) {
  progress("the per-op profile");
  std::vector<Generator::Finished> finished;
  profiler::reset();
  profiler::set_enabled(true);
  double total = 0;
  for (int r = 0; r < runs; ++r) total += run_batch(model, encoder, gen, batch, finished).total_ms;
  profiler::set_enabled(false);
  std::printf("\n== per-op profile, batch-%d generate (%d runs, %.2f ms each) ==\n", batch, runs,
              total / runs);
  print_profile(runs, total);
  return 0;
}

// One text, greedy until eos (at most 64 new tokens), batch 1, on a persistent Encoder and
// Generator as the encoder and decoder services hold them.
int run_text(const std::shared_ptr<const T5Model>& model, const std::string& text, int runs,
             bool profile) {
  Tokenizer tokenizer(model->dir() + "/spiece.model");
  const std::vector<std::vector<int>> inputs = {tokenizer.encode(text)};
  const DecodingOptions o{.max_new_tokens = 64};
  Encoder encoder(model);
  GeneratorOptions go;
  go.cache = {.num_slots = 32, .max_beams = 8, .max_target_len = 65, .max_source_len = 128};
  Generator gen(model, go);
  std::vector<Generator::Finished> finished;
  finished.reserve(32);
  auto once = [&](double& encode_ms) {
    finished.clear();
    const auto t0 = Clock::now();
    EncoderOutput enc = encoder.encode(inputs);
    encode_ms = ms_since(t0);
    gen.add(enc, 0, o);
    while (gen.active() > 0) gen.step(finished);
    return ms_since(t0);
  };
  double encode_ms = 0;
  progress("the text: 5 warm-up runs, then the measured ones");
  for (int w = 0; w < 5; ++w) once(encode_ms);
  std::vector<double> gen_ms, enc_ms;
  const double cpu0 = process_cpu_ms();
  for (int r = 0; r < runs; ++r) {
    gen_ms.push_back(once(encode_ms));
    enc_ms.push_back(encode_ms);
  }
  const double cpu_ms = (process_cpu_ms() - cpu0) / runs;
  const GenerationResult& result = finished.at(0).result;
  std::printf("compute type %s%s\n", std::string(compute_type_name(model->compute_type())).c_str(),
              model->options().cpu_kernels == CpuKernels::kPortable ? " (portable kernels)" : "");
  std::printf("text \"%s\": %zu tokens in, %zu out (\"%s\"); %d runs after 5 warm-up\n",
              text.c_str(), inputs[0].size(), result.ids.size() - 1,
              tokenizer.decode(result.ids).c_str(), runs);
  std::printf("generate      median %8.3f ms   p99 %8.3f ms\n", percentile(gen_ms, 50),
              percentile(gen_ms, 99));
  std::printf("encoder only  median %8.3f ms   p99 %8.3f ms\n", percentile(enc_ms, 50),
              percentile(enc_ms, 99));
  std::printf("process CPU time per generate: %.3f ms (all threads)\n", cpu_ms);
  if (profile) {
    progress("the per-op profile");
    profiler::reset();
    profiler::set_enabled(true);
    double total = 0;
    for (int r = 0; r < runs; ++r) total += once(encode_ms);
    profiler::set_enabled(false);
    std::printf("\n== per-op profile (%d runs, %.3f ms each) ==\n", runs, total / runs);
    print_profile(runs, total);
  }
  return 0;
}

// A Generator's options for the seed workload at up to `slots` sequences.
GeneratorOptions seed_generator_options(int slots) {
  GeneratorOptions go;
  go.cache = {
      .num_slots = slots, .max_beams = 1, .max_target_len = kNewTokens + 1, .max_source_len = 16};
  return go;
}

// --versus T: batch-32 generates in --compute-type (A) and in T (B), alternating one by one in
// this process (A B, then B A), so that a change in the host's speed, which comes and goes within
// seconds on a shared machine, falls on both sides of a pair: each pair's sequences/s and the
// ratio A / B, then the pairs' median and lowest ratio.
int run_versus(const std::string& dir, ModelOptions options, ComputeType other, int runs) {
  constexpr int kBatch = 32;
  struct Side {
    std::shared_ptr<const T5Model> model;
    std::unique_ptr<Encoder> encoder;
    std::unique_ptr<Generator> gen;
  };
  auto load = [&](ComputeType type) {
    options.compute_type = type;
    Side side{.model = T5Model::load(dir, options), .encoder = nullptr, .gen = nullptr};
    side.encoder = std::make_unique<Encoder>(side.model);
    side.gen = std::make_unique<Generator>(side.model, seed_generator_options(kBatch));
    return side;
  };
  progress("loading the model twice");
  Side sides[2] = {load(options.compute_type), load(other)};
  std::vector<Generator::Finished> finished;
  auto seqs_per_s = [&](Side& side) {
    return kBatch /
           (run_batch(side.model, *side.encoder, *side.gen, kBatch, finished).total_ms / 1000.0);
  };
  for (Side& side : sides) {
    for (int w = 0; w < 2; ++w) seqs_per_s(side);
  }
  const std::string a(compute_type_name(sides[0].model->compute_type()));
  const std::string b(compute_type_name(sides[1].model->compute_type()));
  std::printf("batch %d, %s against %s, alternating generate by generate (sequences/s):\n", kBatch,
              a.c_str(), b.c_str());
  std::vector<double> ratios;
  for (int r = 0; r < runs; ++r) {
    double rate[2];
    for (int i = 0; i < 2; ++i) {
      const int side = r % 2 == 0 ? i : 1 - i;
      rate[side] = seqs_per_s(sides[side]);
    }
    ratios.push_back(rate[0] / rate[1]);
    std::printf("pair %2d: %s %7.1f  %s %7.1f  ratio %.2fx\n", r + 1, a.c_str(), rate[0], b.c_str(),
                rate[1], ratios.back());
  }
  std::printf("%s / %s over %d pairs: median %.2fx, lowest %.2fx, highest %.2fx\n", a.c_str(),
              b.c_str(), runs, percentile(ratios, 50),
              *std::min_element(ratios.begin(), ratios.end()),
              *std::max_element(ratios.begin(), ratios.end()));
  return 0;
}

void usage(std::FILE* to) {
  std::fprintf(
      to,
      "usage: engine_bench --model DIR [--threads N] [--runs N] [--profile] [--profile-batch N]\n"
      "                    [--text TEXT] [--compute-type T] [--portable-kernels] [--quick]\n"
      "                    [--device D] [--no-cuda-graphs] [--versus T]\n"
      "  the seed workload: 9 input tokens, exactly 11 new tokens, greedy\n"
      "  --compute-type: float32 (default), bfloat16, int8, int8_bfloat16 or auto\n"
      "    (on a GPU: float32, bfloat16, float16; auto: bfloat16)\n"
      "  --device: cpu (default), cuda or cuda:N; on a GPU batch 64 is measured too, and the\n"
      "    CPU's limits are not\n"
      "  --no-cuda-graphs: on a GPU, every op of a decoder step issued as it comes, not replayed\n"
      "    as a recorded CUDA graph (ModelOptions::cuda_graphs)\n"
      "  --portable-kernels: the engine's own bf16 / int8 kernels, not oneDNN's\n"
      "  --quick: skip measuring the machine's limits\n"
      "  --profile: each op's time, and on a GPU each kernel's device time (CUDA events, every\n"
      "    op issued as it comes: no graphs)\n"
      "  --text: that text instead (DIR/spiece.model), greedy until eos, batch 1\n"
      "  --versus T: only batch 32, --compute-type against T, alternating generate by generate\n"
      "    for --runs pairs; prints each pair's ratio and their median\n");
}

// The command line, checked.
struct BenchArgs {
  std::string dir, text;
  int threads = 2, runs = 50, profile_batch = 1;
  bool profile = false;
  bool quick = false;  // skip the machine's limits (bandwidth, FMA peak): for side-by-side runs
  ModelOptions options{.threads = 2};
  std::optional<ComputeType> versus_type;
};

// The command line into `args`; false after --help. Throws on a wrong one.
bool parse_args(int argc, char** argv, BenchArgs& args) {
  bool help = false, portable = false, no_graphs = false;
  std::string compute_type = "float32", device = "cpu", versus;
  CLI::App app;
  seqpipe::cli::set_up(app);
  app.add_flag("-h,--help", help);
  app.add_option("--model", args.dir);
  seqpipe::cli::add_number(app, "--threads", args.threads);
  seqpipe::cli::add_number(app, "--runs", args.runs);
  app.add_flag("--profile", args.profile);
  seqpipe::cli::add_number(app, "--profile-batch", args.profile_batch);
  app.add_flag("--quick", args.quick);
  app.add_option("--text", args.text);
  app.add_option("--compute-type", compute_type);
  app.add_flag("--portable-kernels", portable);
  app.add_option("--device", device);
  app.add_flag("--no-cuda-graphs", no_graphs);
  app.add_option("--versus", versus);
  const std::vector<std::string> unknown = seqpipe::cli::parse(app, argc, argv);
  if (help) return false;
  if (!unknown.empty())
    throw seqpipe::cli::UsageError("unknown argument '" + unknown.front() + "'");
  if (args.dir.empty()) throw seqpipe::cli::UsageError("--model is required");
  if (args.threads < 1) throw seqpipe::cli::UsageError("--threads must be at least 1");
  if (args.runs < 5) throw seqpipe::cli::UsageError("--runs must be at least 5");
  ModelOptions& options = args.options;
  options.compute_type = parse_compute_type(compute_type);
  if (!versus.empty()) args.versus_type = parse_compute_type(versus);
  if (args.versus_type && (args.profile || !args.text.empty()))
    throw seqpipe::cli::UsageError("--versus measures batch 32 only: not with --profile or --text");
  if (portable) options.cpu_kernels = CpuKernels::kPortable;
  const DeviceSpec spec = parse_device(device);
  options.device = spec.device;
  options.device_index = spec.index;
  options.cuda_graphs = !no_graphs;
  // The Generator holds the largest batch measured: 32 on the CPU, 64 on a GPU.
  if (args.profile_batch < 1 || args.profile_batch > (spec.device == Device::kCpu ? 32 : 64))
    throw seqpipe::cli::UsageError("--profile-batch must be in 1..32 (1..64 on a GPU)");
  options.threads = args.threads;
  return true;
}

void print_model_header(const T5Model& model, const BenchArgs& args, int slots,
                        size_t cache_bytes) {
  const T5Config& c = model.config();
  std::printf(
      "model %s: d_model %ld, d_ff %ld, %ld+%ld layers, vocab %ld; device %s; %d threads; "
      "compute type %s%s\n",
      args.dir.c_str(), long(c.d_model), long(c.d_ff), long(c.num_layers),
      long(c.num_decoder_layers), long(c.vocab_size),
      device_string(args.options.device_spec()).c_str(), args.threads,
      std::string(compute_type_name(model.compute_type())).c_str(),
      args.options.cpu_kernels == CpuKernels::kPortable ? " (portable kernels)" : "");
  std::printf("weights: %.1f MB as stored, %.1f MB converted; KV cache (%d slots): %.1f MB\n",
              model.mapped_weight_bytes() / 1e6, model.converted_weight_bytes() / 1e6, slots,
              cache_bytes / 1e6);
}

// Bytes a batch-1 decoder step must stream: every decoder weight but the cross K/V projections
// (computed once per sequence), plus the lm_head, in the compute type; and the weights' count
// (one multiply-add each per sequence).
struct StepTraffic {
  double bytes = 0, weights = 0;
};

StepTraffic step_traffic(const T5Model& model) {
  StepTraffic traffic{.bytes = double(model.lm_head().bytes()),
                      .weights = double(model.config().vocab_size * model.config().d_model)};
  for (const auto& b : model.decoder_blocks()) {
    for (const LinearWeight* w : {&b.self_attention.qkv, &b.self_attention.o, &b.cross_attention.q,
                                  &b.cross_attention.o, &b.ffn.wi, &b.ffn.wi_1, &b.ffn.wo}) {
      if (!w->defined()) continue;
      traffic.bytes += double(w->bytes());
      traffic.weights += double(w->out * w->in);
    }
  }
  return traffic;
}

// Batch 1, `runs` generates after 5 warm-up ones, printed; the median decoder step in ms, or
// nothing when a generate did not make its 11 tokens.
std::optional<double> measure_batch1(const std::shared_ptr<const T5Model>& model, Encoder& encoder,
                                     Generator& gen, int runs,
                                     std::vector<Generator::Finished>& finished) {
  progress("batch 1: 5 warm-up runs, then the measured ones");
  for (int w = 0; w < 5; ++w) run_batch(model, encoder, gen, 1, finished);  // warm-up
  std::vector<double> gen_ms, enc_ms, step1_ms;
  uint64_t loop_allocs = 0;
  const double cpu0 = process_cpu_ms();
  for (int r = 0; r < runs; ++r) {
    BatchTiming t = run_batch(model, encoder, gen, 1, finished);
    gen_ms.push_back(t.total_ms);
    enc_ms.push_back(t.encode_ms);
    step1_ms.insert(step1_ms.end(), t.step_ms.begin() + 1, t.step_ms.end());
    loop_allocs += t.decode_loop_allocations;
  }
  const double cpu_ms = (process_cpu_ms() - cpu0) / runs;
  if (finished.empty() || finished[0].result.ids.size() != kNewTokens + 1) {
    std::fprintf(stderr, "engine_bench: expected %d new tokens\n", kNewTokens);
    return std::nullopt;
  }
  std::printf("\n== batch 1 (%d runs after 5 warm-up) ==\n", runs);
  std::printf("generate      median %8.2f ms   p99 %8.2f ms   process CPU %8.2f ms\n",
              percentile(gen_ms, 50), percentile(gen_ms, 99), cpu_ms);
  std::printf("encoder only  median %8.2f ms   p99 %8.2f ms\n", percentile(enc_ms, 50),
              percentile(enc_ms, 99));
  std::printf("decoder step  median %8.3f ms   p99 %8.3f ms\n", percentile(step1_ms, 50),
              percentile(step1_ms, 99));
  // 0 in every compute type: decoder steps keep out of oneDNN's execute, which allocates
  // (src/cpu/packed_gemm.h).
  std::printf("heap allocations inside the decode loop: %lu over %d runs x %d steps\n",
              (unsigned long)loop_allocs, runs, kNewTokens - 1);
  return percentile(step1_ms, 50);
}

// Each of `batches`, printed; (batch, median decoder step in ms) of each.
std::vector<std::pair<int, double>> measure_batches(const std::shared_ptr<const T5Model>& model,
                                                    Encoder& encoder, Generator& gen,
                                                    const std::vector<int>& batches, int runs,
                                                    std::vector<Generator::Finished>& finished) {
  const int batch_runs = std::max(5, runs / 5);
  std::printf("\n== larger batches (median of %d runs) ==\n", batch_runs);
  std::vector<std::pair<int, double>> step_at;
  for (int batch : batches) {
    progress(("batch " + std::to_string(batch)).c_str());
    for (int w = 0; w < 2; ++w) run_batch(model, encoder, gen, batch, finished);
    std::vector<double> total, steps, encode;
    const double batch_cpu0 = process_cpu_ms();
    for (int r = 0; r < batch_runs; ++r) {
      BatchTiming t = run_batch(model, encoder, gen, batch, finished);
      total.push_back(t.total_ms);
      encode.push_back(t.encode_ms);
      steps.insert(steps.end(), t.step_ms.begin() + 1, t.step_ms.end());
    }
    const double batch_cpu_ms = (process_cpu_ms() - batch_cpu0) / batch_runs;
    const double sps = batch / (percentile(total, 50) / 1000.0);
    step_at.emplace_back(batch, percentile(steps, 50));
    std::printf(
        "batch %2d: generate %8.2f ms (encoder %7.2f ms), decoder step %7.2f ms, %7.1f "
        "sequences/s; process CPU %8.2f ms\n",
        batch, percentile(total, 50), percentile(encode, 50), percentile(steps, 50), sps,
        batch_cpu_ms);
  }
  return step_at;
}

// This machine's read bandwidth and FMA peaks, measured, and the decoder steps measured as a
// fraction of each.
void print_machine_limits(int threads, StepTraffic traffic, double step1_ms,
                          const std::vector<std::pair<int, double>>& step_at) {
  progress("measuring this machine's read bandwidth and FMA peak");
  const double bw = seqpipe::bench::read_bandwidth_gbs(threads, size_t(512) << 20);
  const double bw_step =
      seqpipe::bench::read_bandwidth_gbs(threads, static_cast<size_t>(traffic.bytes));
  const double blas_peak = seqpipe::bench::gemm_peak_gflops();
  const double peak = seqpipe::bench::fma_peak_gflops(threads);
  const double step_floor_ms = traffic.bytes / (bw * 1e9) * 1000.0;
  std::printf("\n== limits of this machine ==\n");
  std::printf(
      "read bandwidth (%d threads): %.1f GB/s; a batch-1 decoder step streams %.1f MB -> floor "
      "%.2f ms\n",
      threads, bw, traffic.bytes / 1e6, step_floor_ms);
  std::printf("batch-1 decoder step: %.2f ms = %.0f%% of the bandwidth limit\n", step1_ms,
              100.0 * step_floor_ms / step1_ms);
  std::printf(
      "re-reading a %.1f MB working set (a step's weights): %.1f GB/s -> floor %.2f ms, the step "
      "is at %.0f%% of it\n",
      traffic.bytes / 1e6, bw_step, traffic.bytes / (bw_step * 1e9) * 1000.0,
      100.0 * traffic.bytes / (bw_step * 1e9) * 1000.0 / step1_ms);
  // FLOPs of one decoder step per sequence ~ 2 * streamed weights (floats); encoder ignored.
  const double flops_per_seq_step = 2.0 * traffic.weights;
  std::printf(
      "fp32 FMA peak (%d threads, measured): %.1f GFLOP/s; OpenBLAS sgemm n=1536: %.1f GFLOP/s\n",
      threads, peak, blas_peak);
  // int8 can beat fp32 by no more than this where both are bound by their instructions' rate.
  const double vnni = seqpipe::bench::vnni_peak_gmacs(threads);
  if (vnni > 0) {
    std::printf(
        "int8 vpdpbusd peak (%d threads, measured): %.1f G multiply-adds/s = %.2fx the fp32 FMA "
        "peak's\n",
        threads, vnni, vnni / (peak / 2));
  }
  for (auto [batch, ms] : step_at) {
    const double gflops = flops_per_seq_step * batch / (ms / 1000.0) / 1e9;
    std::printf("batch-%d decoder step: %.1f GFLOP/s = %.0f%% of the FMA peak", batch, gflops,
                100.0 * gflops / peak);
    if (vnni > 0) std::printf(", %.0f%% of vpdpbusd's", 100.0 * gflops / 2 / vnni);
    std::printf("\n");
  }
}

// The seed workload: batch 1, the larger batches, then (on the CPU, without --quick) the
// machine's limits and the peak resident memory; and --profile's table.
int run_seed(const std::shared_ptr<const T5Model>& model, const BenchArgs& args) {
  Encoder encoder(model);
  const bool on_gpu = args.options.device != Device::kCpu;
  // A GPU is measured at batch 64 too (the seed's serving batch there).
  const std::vector<int> batches = on_gpu ? std::vector<int>{8, 32, 64} : std::vector<int>{8, 32};
  Generator gen(model, seed_generator_options(batches.back()));
  std::vector<Generator::Finished> finished;
  finished.reserve(32);
  print_model_header(*model, args, batches.back(), gen.cache().bytes());
  const StepTraffic traffic = step_traffic(*model);
  const std::optional<double> step1_ms = measure_batch1(model, encoder, gen, args.runs, finished);
  if (!step1_ms) return 1;
  const auto step_at = measure_batches(model, encoder, gen, batches, args.runs, finished);
  if (args.quick || on_gpu)
    return args.profile ? run_profile(model, encoder, gen, args.profile_batch, args.runs) : 0;
  print_machine_limits(args.threads, traffic, *step1_ms, step_at);
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "\npeak resident memory: %.1f MB (includes the 512 MiB bandwidth buffer; weights %.1f MB, "
      "KV cache %.1f MB)\n",
      ru.ru_maxrss / 1024.0, (model->mapped_weight_bytes() + model->converted_weight_bytes()) / 1e6,
      gen.cache().bytes() / 1e6);
  if (args.profile) run_profile(model, encoder, gen, args.profile_batch, args.runs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Each line out as soon as it is printed, also into a pipe (`| tee`) and when killed midway.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  BenchArgs args;
  try {
    if (!parse_args(argc, argv, args)) return usage(stdout), 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_bench: %s\n", e.what());
    usage(stderr);
    return 2;
  }
  try {
    if (args.versus_type) return run_versus(args.dir, args.options, *args.versus_type, args.runs);
    progress("loading the model");
    auto model = T5Model::load(args.dir, args.options);
    if (!args.text.empty()) return run_text(model, args.text, args.runs, args.profile);
    return run_seed(model, args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_bench: %s\n", e.what());
    return 1;
  }
}
