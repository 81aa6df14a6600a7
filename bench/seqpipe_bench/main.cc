// seqpipe-bench: a load generator for a seqpipe gateway, after NVIDIA perf_analyzer (closed loop
// at a concurrency or a concurrency sweep, open loop at a request rate, perf_analyzer's CSV) and
// SageMaker Inference Recommender / model_analyzer (`sweep`: try pipeline configurations, keep
// the best one under a latency SLO).
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "options.h"
#include "plot.h"
#include "report.h"
#include "seqpipe/config/config.h"
#include "seqpipe/runtime/service.h"
#include "sweep.h"

namespace {

namespace bench = seqpipe::bench;
namespace cli = seqpipe::cli;

constexpr std::string_view kUsage =
    R"(usage: seqpipe-bench [WHERE] LOAD [STOP] [INPUTS] [REQUEST] [REPORT]
       seqpipe-bench sweep --model DIR [sweep options] [STOP] [INPUTS] [REQUEST] [REPORT]
       seqpipe-bench plot FILE.csv [FILE.csv ...] OUT.png

Sends requests to a running pipeline's gateway and reports throughput, latency percentiles,
errors by code and the per-stage time the replies carry (timings_us: queue, tokenize,
batch_wait, encode, decode, postprocess; overhead = latency - those = transport, hubs, client).

WHERE (as `seqpipe send`)
  --endpoint EP              gateway client endpoint (tcp://HOST:PORT or ipc://PATH); default:
  --config FILE, --set k=v   gateway.client_endpoint of this config (config/pipeline.yaml if
                             present, else tcp://127.0.0.1:5555); its security keys make
                             the client CurveZMQ (docs/DEPLOY.md, "Keys")

LOAD (exactly one)
  --concurrency N            closed loop: N requests in flight, a new one as soon as one returns
  --concurrency-range A:B    closed-loop sweep: A, 2A, 4A, ... B, each level measured apart
                             (replies drained in between); stops when throughput grows by less
                             than --min-gain (default 0.05 = 5%; -1 runs every level) or, with
                             --slo-p99-ms, when a level's p99 is over the SLO
  --request-rate R           open loop: R requests/s whatever the replies do (sending wakes on a
                             1 ms timer; late sends catch up, the mean rate holds)
    --distribution constant|poisson   gaps of exactly 1/R, or exponential with mean 1/R (default constant)
  --phases SPEC | @FILE      phases run back to back, each closed (users=N) or open (rate=R):
                               "users=2,spawn=1,duration=10;users=8,spawn=2,duration=20;rate=50,duration=5"
                             keys: users, spawn (users added/removed per second, from the previous
                             phase's count), rate, distribution, duration (s), requests.
                             @FILE: the same, one phase a line, '#' comments

STOP (per step: per level of a sweep; phases carry their own)
  --duration S               stop sending after S seconds (default 10 when no --requests; sweep: 3)
  --requests N               stop after N requests sent (with --duration: whichever comes first)
  --warmup N                 first send N requests (closed loop, the first step's concurrency or
                             4) and discard them (default 0)
  Every run ends by waiting for the replies still due (up to --timeout-ms + 2 s); those that
  never come are errors `no_reply`.

INPUTS (each request is one text; requests cycle through the inputs, so with the gateway's
response cache on, repeats are cache hits)
  --input FILE               one text a line (blank lines skipped)
  --words MIN:MAX            otherwise generated: --input-count texts (default 1000) of a uniform
                             number of words in [MIN, MAX] (default 3:12) from a built-in word list
  --seed N                   seed of the generated texts and of the poisson gaps (default 1)

REQUEST
  --max-new-tokens N (default 32, the server's default)   --min-new-tokens N (default 0)
  --num-beams N (default 1)  --timeout-ms N (default 10000; the deadline sent with each request)

REPORT (a table on stdout always)
  --window-s S               also summarise by windows of S seconds (replies by arrival time)
  --json FILE                settings, steps, windows, overall, SLO result
  --csv FILE                 one row per step, perf_analyzer's columns where they match
                             (Concurrency, Inferences/Second, Client Send, Network+Server Send/Recv,
                             Server Queue, Server Compute Input/Infer/Output, p50/p90/p95/p99
                             latency, Avg latency; microseconds), then seqpipe's stage columns
  --slo-p99-ms MS            report the step with the highest throughput whose p99 <= MS and no errors
  --max-records N            requests recorded at most (preallocated; default from the stop conditions)
  --no-progress              no live progress line (it is shown only when stderr is a terminal)

sweep (model_analyzer-like): for each combination of --grid, starts a private pipeline
  (`seqpipe up --config ... --set ...`, its own runtime dir and ipc:// socket, metrics on free
  ports), waits until it answers, runs a closed-loop --concurrency-range (default 1:16, 3 s a
  level), stops it, and prints the configurations ranked by the best throughput under
  --slo-p99-ms (default 50), i.e. the best configuration meeting the SLO.
  --model DIR                the model directory (model.dir)
  --grid "key=v1,v2;key=v1,v2"   config keys and values to combine; default
                             "decoder.replicas=1,2;batcher.max_batch_size=1,16;batcher.max_queue_delay_us=0,2000"
                             (8 pipelines). batcher.preferred_batch_sizes follows max_batch_size
                             (the sizes 8, 16, 32 that fit) unless --set or --grid name it.
  --config FILE, --set k=v   the base configuration every pipeline starts from
  --rounds N                 measure every configuration N times, the rounds interleaved, and
                             rank by the median of each level; a level counts only if every
                             round ran it (default 1; on a shared, noisy machine one round can
                             rank configurations by the neighbours' load)
  --seqpipe PATH             the seqpipe binary (default: the one built with this tool)
  --write-config FILE        write the best configuration under the SLO as a config file: the
                             --config file's keys with the --set and grid values set in it
                             (serve it with `seqpipe up --config FILE`); nothing when no
                             configuration met the SLO
  --json / --csv             JSON: the (median) levels of every configuration; CSV: every level of
                             every round, the grid keys and the round first

plot: latency (p50, p99) against throughput, one line per CSV, and the mean per-stage time per
  step of each CSV, as one PNG drawn by gnuplot (Debian package gnuplot-nox).

exit status: 0 ok (errors in replies are reported, not fatal), 1 the run could not be made
(no gateway, a pipeline that does not start, gnuplot failing), 2 bad usage, 130 interrupted
(Ctrl-C, SIGTERM: sending stops, replies due are awaited, and the report covers what ran)
)";

int run_main(int argc, char** argv) {
  bench::LoadOptions options;
  bool help = false;
  CLI::App app;
  cli::set_up(app);
  app.add_flag("-h,--help", help);
  bench::add_load_options(app, options);
  const std::vector<std::string> unknown = cli::parse(app, argc, argv);
  if (help) {
    std::cout << kUsage;
    return 0;
  }
  if (!unknown.empty()) throw cli::UsageError("unknown option '" + unknown.front() + "'");
  bench::finish_load_options(options, false);
  const std::string endpoint = bench::resolve_endpoint(options);
  seqpipe::service::install_stop_handlers();  // Ctrl-C stops sending and still reports

  if (options.warmup > 0) {
    bench::RunOptions warm = bench::make_run_options(options, endpoint);
    warm.max_records = options.warmup;
    warm.progress = false;
    bench::Runner runner(warm);
    bench::LoadStep step;
    step.users = options.concurrency.value_or(
        options.concurrency_range ? options.concurrency_range->first : 4);
    step.requests = options.warmup;
    step.label = "warm-up";
    runner.run_step(step);
    runner.take_result();
  }

  bench::Runner runner(bench::make_run_options(options, endpoint));
  bench::LoadStep step;
  step.duration = std::chrono::microseconds(static_cast<int64_t>(options.duration_s * 1e6));
  step.requests = options.requests;
  if (options.concurrency_range) {
    bench::ConcurrencySweep sweep{options.concurrency_range->first,
                                  options.concurrency_range->second, options.min_gain,
                                  options.slo_p99_ms, step};
    bench::run_concurrency_sweep(runner, sweep);
  } else if (!options.phases.empty()) {
    for (const bench::LoadStep& phase : options.phases) {
      if (!runner.run_step(phase)) break;
    }
  } else {
    if (options.concurrency) {
      step.users = *options.concurrency;
      step.label = "concurrency " + std::to_string(step.users);
    } else {
      step.rate_per_s = *options.request_rate;
      step.arrival = options.arrival;
      char label[64];
      std::snprintf(label, sizeof label, "rate %g/s %s", step.rate_per_s,
                    step.arrival == bench::Arrival::kPoisson ? "poisson" : "constant");
      step.label = label;
    }
    runner.run_step(step);
  }
  const bench::RunResult run = runner.take_result();
  const auto steps = bench::summarize_steps(run);
  const auto windows = bench::summarize_windows(run, options.window_s);
  const auto overall = bench::summarize_all(run);
  bench::print_table(stdout, steps, windows, overall, options.slo_p99_ms);
  if (!options.json_path.empty()) {
    bench::write_json(options.json_path, bench::settings_json(options, endpoint), steps, windows,
                      overall, options.slo_p99_ms);
  }
  if (!options.csv_path.empty()) bench::write_csv(options.csv_path, steps);
  if (seqpipe::service::stop_requested()) {
    std::fprintf(stderr, "seqpipe-bench: interrupted; the report covers what ran\n");
    return 130;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::strcmp(argv[1], "plot") == 0) return bench::plot_main(argc - 1, argv + 1);
    if (argc >= 2 && std::strcmp(argv[1], "sweep") == 0)
      return bench::sweep_main(argc - 1, argv + 1, kUsage);
    return run_main(argc, argv);
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "seqpipe-bench: %s (see seqpipe-bench --help)\n", e.what());
    return 2;
  } catch (const seqpipe::config::ConfigError& e) {
    std::fprintf(stderr, "seqpipe-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seqpipe-bench: %s\n", e.what());
    return 1;
  }
}
