#pragma once
// seqpipe-bench's command line: the load options shared by a plain run and by `sweep`.
#include <optional>
#include <string>
#include <vector>

#include "load.h"
#include "seqpipe/cli/cli.h"

namespace seqpipe::bench {

struct LoadOptions {
  // Where: --endpoint, else gateway.client_endpoint of --config / --set (as `seqpipe send`).
  std::string endpoint, config_path;
  std::vector<std::string> overrides;
  // How: exactly one of these.
  std::optional<int> concurrency;
  std::optional<std::pair<int, int>> concurrency_range;
  std::optional<double> request_rate;
  std::vector<LoadStep> phases;
  Arrival arrival = Arrival::kConstant;
  double min_gain = 0.05;
  // Stop condition of each step (each level of a sweep); 0 = not set.
  double duration_s = 0;
  uint64_t requests = 0;
  uint64_t warmup = 0;
  // What: a file, or generated texts.
  std::string input_path;
  int min_words = 3, max_words = 12;
  size_t input_count = 1000;
  uint64_t seed = 1;
  protocol::GenerateParams params;
  uint32_t timeout_ms = 10000;
  // Report.
  double window_s = 0;
  std::string json_path, csv_path;
  std::optional<double> slo_p99_ms;
  uint64_t max_records = 0;  // 0: derived from the stop conditions
  bool progress = true;      // only when stderr is a terminal
};

// Declares the load options on `app`, each checked as it is read (throws cli::UsageError).
void add_load_options(CLI::App& app, LoadOptions& options);
// Cross-option checks and defaults, once every flag is read. Throws cli::UsageError.
void finish_load_options(LoadOptions& options, bool sweep_subcommand);
// "users=2,spawn=1,duration=10;rate=50,duration=5" or the same one phase a line (file form).
std::vector<LoadStep> parse_phases(const std::string& text, Arrival arrival);

std::string resolve_endpoint(const LoadOptions& options);
std::vector<std::string> load_inputs(const LoadOptions& options);
RunOptions make_run_options(const LoadOptions& options, std::string endpoint);
// The settings as a JSON object, for the report.
std::string settings_json(const LoadOptions& options, const std::string& endpoint);

}  // namespace seqpipe::bench
