#pragma once
// What a run measured, summarised per step (a concurrency level, a rate, a phase), per time
// window and overall, and written as a table, JSON and perf_analyzer-style CSV.
#include <array>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "load.h"

namespace seqpipe::bench {

// Client-side latency over the successful replies, microseconds. Percentiles by nearest rank.
struct LatencySummary {
  uint64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, p999 = 0, max = 0;
};

// Means over the successful replies, microseconds: the reply's per-stage timings, the client's
// own send time, and what is left of the client latency (transport, the hubs, the client's wait).
struct StageMeans {
  double client_send = 0, queue = 0, tokenize = 0, batch_wait = 0, encode = 0, decode = 0,
         postprocess = 0;
  double server_total = 0;
  double overhead = 0;  // latency - client_send - the six stages
};

struct Summary {
  std::string label;
  int users = 0;          // closed loop (0: open loop)
  double rate_per_s = 0;  // open loop (0: closed loop)
  uint64_t requests = 0;  // sent
  uint64_t ok = 0;
  std::array<uint64_t, kStatusCount> by_status{};  // count per RequestStatus
  double seconds = 0;                              // the time the throughput is over
  double throughput = 0;                           // ok replies per second
  LatencySummary latency;
  // Client-side latency of the error replies (a wire error code: the server answered, e.g.
  // `overloaded`): how fast a refused request hears.
  LatencySummary error_latency;
  // The `overloaded` replies' alone: the refusals, without the deadline misses, which answer
  // at the deadline.
  LatencySummary refusal_latency;
  StageMeans stages;

  uint64_t errors() const { return requests - ok; }
};

// One summary per step: the requests sent in it, over the time from its start to its last reply.
std::vector<Summary> summarize_steps(const RunResult& run);
// One summary per window of `window_s` seconds: the requests answered (or given up) in it.
std::vector<Summary> summarize_windows(const RunResult& run, double window_s);
// Every request of the run, from the first send to the last reply.
Summary summarize_all(const RunResult& run);

// Repeated measurements of one step as one: throughput and each latency figure the median of
// theirs (each separately), counts summed, stage means the median of theirs.
Summary median_of(const std::vector<Summary>& repeats);

// The step with the highest throughput among those whose p99 latency is at most `slo_p99_ms`
// with no errors; nullopt when none met it.
std::optional<size_t> best_under_slo(const std::vector<Summary>& steps, double slo_p99_ms);

// Rows of summaries under a title, one line each.
void print_summaries(std::FILE* out, const char* title, const std::vector<Summary>& rows);
// The whole report: windows (if any), steps, overall, the SLO result.
void print_table(std::FILE* out, const std::vector<Summary>& steps,
                 const std::vector<Summary>& windows, const Summary& overall,
                 std::optional<double> slo_p99_ms);
// One JSON document: settings, steps, windows, overall, the SLO result. Throws on a write error.
void write_json(const std::string& path, const std::string& settings_json,
                const std::vector<Summary>& steps, const std::vector<Summary>& windows,
                const Summary& overall, std::optional<double> slo_p99_ms);
// One row per step, perf_analyzer's column names where they mean the same (microseconds), then
// seqpipe's own stage columns. `extra` columns (name, value per row) come first (the sweep's
// configuration). Throws on a write error.
struct ExtraColumns {
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> values;  // one vector per row
};
void write_csv(const std::string& path, const std::vector<Summary>& rows,
               const ExtraColumns& extra = {});

}  // namespace seqpipe::bench
