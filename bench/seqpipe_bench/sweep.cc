#include "sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "options.h"
#include "report.h"
#include "seqpipe/runtime/service.h"
#include "write_config.h"

namespace seqpipe::bench {

namespace {

namespace fs = std::filesystem;
using cli::UsageError;

constexpr const char* kDefaultGrid =
    "decoder.replicas=1,2;batcher.max_batch_size=1,16;batcher.max_queue_delay_us=0,2000";

struct GridAxis {
  std::string key;
  std::vector<std::string> values;
};

std::vector<GridAxis> parse_grid(const std::string& text) {
  std::vector<GridAxis> grid;
  std::stringstream axes(text);
  std::string axis_text;
  while (std::getline(axes, axis_text, ';')) {
    if (axis_text.find_first_not_of(' ') == std::string::npos) continue;
    const auto eq = axis_text.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError("--grid: expected key=v1,v2, got '" + axis_text + "'");
    GridAxis axis{axis_text.substr(0, eq), {}};
    std::stringstream values(axis_text.substr(eq + 1));
    std::string value;
    while (std::getline(values, value, ',')) {
      if (!value.empty()) axis.values.push_back(value);
    }
    if (axis.values.empty()) throw UsageError("--grid: no values for '" + axis.key + "'");
    grid.push_back(std::move(axis));
  }
  if (grid.empty()) throw UsageError("--grid: empty");
  return grid;
}

// Every combination, the first axis varying slowest.
std::vector<std::vector<std::string>> combinations(const std::vector<GridAxis>& grid) {
  std::vector<std::vector<std::string>> out{{}};
  for (const GridAxis& axis : grid) {
    std::vector<std::vector<std::string>> next;
    for (const auto& prefix : out) {
      for (const std::string& value : axis.values) {
        next.push_back(prefix);
        next.back().push_back(value);
      }
    }
    out = std::move(next);
  }
  return out;
}

// `seqpipe up` as a child in its own runtime dir, stopped (SIGTERM, then what `up` does: drain
// up to 5 s, SIGKILL) when this goes out of scope.
class PrivatePipeline {
 public:
  PrivatePipeline(const std::string& seqpipe, const std::vector<std::string>& up_args) {
    char dir_template[] = "/tmp/seqpipe-bench.XXXXXX";
    if (::mkdtemp(dir_template) == nullptr)
      throw std::runtime_error("cannot make a temporary directory");
    dir_ = dir_template;
    endpoint_ = "ipc://" + dir_ + "/gateway.sock";
    std::vector<std::string> args{seqpipe, "up"};
    args.insert(args.end(), up_args.begin(), up_args.end());
    const std::vector<std::string> private_settings{
        "runtime_dir=" + dir_,
        "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock",
        "gateway.metrics_port=0",
        "batcher.metrics_port=0",
        "tokenizer.metrics_port=0",
        "encoder.metrics_port=0",
        "decoder.metrics_port=0",
        "postprocessor.metrics_port=0",
        "gateway.http_endpoint=127.0.0.1:0"};
    for (const std::string& s : private_settings) args.insert(args.end(), {"--set", s});
    log_ = dir_ + "/up.log";
    // Unflushed stdio buffers would be copied into the child and written out twice.
    std::fflush(stdout);
    std::fflush(stderr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const int log_fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (log_fd >= 0) {
        ::dup2(log_fd, STDOUT_FILENO);
        ::dup2(log_fd, STDERR_FILENO);
        ::close(log_fd);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      // Only async-signal-safe calls between fork and exit.
      constexpr std::string_view kCannotRun = "seqpipe-bench sweep: cannot run ";
      (void)!::write(STDERR_FILENO, kCannotRun.data(), kCannotRun.size());
      (void)!::write(STDERR_FILENO, argv[0], std::strlen(argv[0]));
      (void)!::write(STDERR_FILENO, "\n", 1);
      std::_Exit(127);
    }
  }
  ~PrivatePipeline() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  PrivatePipeline(const PrivatePipeline&) = delete;
  PrivatePipeline& operator=(const PrivatePipeline&) = delete;

  // Ready when one request goes all the way through; false (the log's tail printed) when the
  // pipeline exits or does not answer within `limit`.
  bool wait_ready(std::chrono::seconds limit) {
    client::Client client(endpoint_);
    protocol::Request request;
    request.texts = {"warm up"};
    request.params.max_new_tokens = 2;
    request.timeout_ms = 1000;
    const auto give_up = Clock::now() + limit;
    while (Clock::now() < give_up && !service::stop_requested()) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      auto answer = client.call(request, std::chrono::milliseconds(1500));
      if (auto* reply = std::get_if<protocol::Reply>(&answer); reply && reply->ok) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    const std::string log = text.str();
    std::fprintf(stderr,
                 "seqpipe-bench sweep: the pipeline did not come up; the end of its log:\n%s\n",
                 log.substr(log.size() > 2000 ? log.size() - 2000 : 0).c_str());
    return false;
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string dir_, endpoint_, log_;
  pid_t pid_ = -1;
};

std::string default_seqpipe() {
#ifdef SEQPIPE_BIN
  if (fs::exists(SEQPIPE_BIN)) return SEQPIPE_BIN;
#endif
  const fs::path next_to_me = fs::read_symlink("/proc/self/exe").parent_path() / "seqpipe";
  return fs::exists(next_to_me) ? next_to_me.string() : "seqpipe";
}

bool names_key(const std::vector<std::string>& overrides, const std::vector<GridAxis>& grid,
               const std::string& key) {
  for (const std::string& o : overrides) {
    if (o.rfind(key + "=", 0) == 0) return true;
  }
  return std::any_of(grid.begin(), grid.end(), [&](const GridAxis& a) { return a.key == key; });
}

// --write-config: the base config file with the configuration's --set assignments (grid values
// included) written into it, headed by what was measured.
void write_best_config(const std::string& path, const std::string& base_config_path,
                       const std::vector<std::string>& up_args, const std::string& measured) {
  std::string base;
  if (!base_config_path.empty()) {
    std::ifstream in(base_config_path);
    std::stringstream text;
    text << in.rdbuf();
    base = text.str();
  }
  std::vector<std::string> assignments;
  for (size_t i = 0; i + 1 < up_args.size(); i += 2) {
    if (up_args[i] == "--set") assignments.push_back(up_args[i + 1]);
  }
  const std::vector<std::string> header{
      "The best configuration of a seqpipe-bench sweep: " + measured + ".",
      "Serve it with: seqpipe up --config " + path};
  std::ofstream file(path);
  file << config_file_text(base, assignments, header);
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
}

std::string preferred_sizes_for(const std::string& max_batch_size) {
  const int max = std::atoi(max_batch_size.c_str());
  std::string list = "[";
  for (int size : {8, 16, 32}) {
    if (size > max) break;
    if (list.size() > 1) list += ",";
    list += std::to_string(size);
  }
  return list + "]";
}

// The command line, checked.
struct SweepArgs {
  LoadOptions options;
  std::string model, grid_text = kDefaultGrid, seqpipe = default_seqpipe(), write_config;
  int rounds = 1;
};

// The command line into `args`; false after --help (usage printed). Throws UsageError.
bool parse_sweep_args(int argc, char** argv, std::string_view usage, SweepArgs& args) {
  LoadOptions& options = args.options;
  bool help = false;
  CLI::App app;
  cli::set_up(app);
  app.add_flag("-h,--help", help);
  add_load_options(app, options);
  app.add_option("--model", args.model);
  app.add_option("--grid", args.grid_text);
  app.add_option_function<std::string>("--rounds", [&](const std::string& text) {
    args.rounds = cli::parse_number<int>("--rounds", text);
    if (args.rounds < 1) throw UsageError("--rounds must be >= 1");
  });
  app.add_option("--seqpipe", args.seqpipe);
  app.add_option("--write-config", args.write_config);
  const std::vector<std::string> unknown = cli::parse(app, argc, argv);
  if (help) {
    std::cout << usage;
    return false;
  }
  if (!unknown.empty()) throw UsageError("sweep: unknown option '" + unknown.front() + "'");
  if (app.count("--endpoint") > 0) {
    throw UsageError("sweep starts its own pipelines: --endpoint does not apply");
  }
  if (args.model.empty()) throw UsageError("sweep needs --model DIR");
  if (!fs::exists(fs::path(args.model) / "config.json"))
    throw UsageError("--model: no config.json in '" + args.model + "'");
  if (!options.slo_p99_ms) options.slo_p99_ms = 50;
  finish_load_options(options, true);
  return true;
}

// One configuration of the grid and what was measured of it.
struct Measured {
  std::vector<std::string> values;
  std::string description;
  std::vector<std::string> up_args;
  std::vector<std::vector<Summary>> rounds;  // each round's levels
  std::vector<Summary> levels;  // the median over the rounds of each level every round ran
  std::optional<size_t> best;   // under the SLO
};

// Every configuration of the grid, with the `seqpipe up` arguments that start it.
std::vector<Measured> plan_configurations(const SweepArgs& args,
                                          const std::vector<GridAxis>& grid) {
  const LoadOptions& options = args.options;
  const bool derive_preferred =
      !names_key(options.overrides, grid, "batcher.preferred_batch_sizes");
  std::vector<Measured> results;
  for (const auto& values : combinations(grid)) {
    Measured m{values, {}, {}, {}, {}, std::nullopt};
    if (!options.config_path.empty()) m.up_args = {"--config", options.config_path};
    m.up_args.insert(m.up_args.end(), {"--set", "model.dir=" + fs::absolute(args.model).string()});
    for (const std::string& o : options.overrides) m.up_args.insert(m.up_args.end(), {"--set", o});
    for (size_t a = 0; a < grid.size(); ++a) {
      m.up_args.insert(m.up_args.end(), {"--set", grid[a].key + "=" + values[a]});
      m.description += (a > 0 ? " " : "") + grid[a].key + "=" + values[a];
      if (derive_preferred && grid[a].key == "batcher.max_batch_size") {
        m.up_args.insert(m.up_args.end(), {"--set", "batcher.preferred_batch_sizes=" +
                                                        preferred_sizes_for(values[a])});
      }
    }
    results.push_back(std::move(m));
  }
  return results;
}

// Each round's concurrency sweep of every configuration, printed as it ends; false when a
// pipeline did not come up.
bool measure_rounds(const SweepArgs& args, std::vector<Measured>& results) {
  const LoadOptions& options = args.options;
  // Rounds visit every configuration in turn, so a burst of load from elsewhere on a shared
  // machine hits one round of each configuration rather than all rounds of one.
  for (int round = 1; round <= args.rounds && !service::stop_requested(); ++round) {
    for (size_t c = 0; c < results.size() && !service::stop_requested(); ++c) {
      Measured& m = results[c];
      std::fprintf(stderr, "seqpipe-bench sweep: round %d/%d, [%zu/%zu] %s\n", round, args.rounds,
                   c + 1, results.size(), m.description.c_str());
      PrivatePipeline pipeline(args.seqpipe, m.up_args);
      if (!pipeline.wait_ready(std::chrono::seconds(90))) return false;
      Runner runner(make_run_options(options, pipeline.endpoint()));
      LoadStep level;
      level.duration = std::chrono::microseconds(static_cast<int64_t>(options.duration_s * 1e6));
      level.requests = options.requests;
      run_concurrency_sweep(runner,
                            {options.concurrency_range->first, options.concurrency_range->second,
                             options.min_gain, options.slo_p99_ms, level});
      m.rounds.push_back(summarize_steps(runner.take_result()));
      const std::string title = args.rounds > 1
                                    ? m.description + " (round " + std::to_string(round) + ")"
                                    : m.description;
      print_summaries(stdout, title.c_str(), m.rounds.back());
      std::fflush(stdout);
    }
  }
  return true;
}

// Each configuration's levels (the medians over the rounds) and its best one under the SLO.
void take_medians(std::vector<Measured>& results, double slo_p99_ms) {
  for (Measured& m : results) {
    // A level counts only if every round ran it (a round may stop earlier on the SLO or the gain).
    for (size_t level = 0; !m.rounds.empty(); ++level) {
      std::vector<Summary> same_level;
      for (const auto& r : m.rounds) {
        if (level < r.size()) same_level.push_back(r[level]);
      }
      if (same_level.size() < m.rounds.size()) break;
      m.levels.push_back(median_of(same_level));
    }
    m.best = best_under_slo(m.levels, slo_p99_ms);
  }
}

// Ranking: configurations that met the SLO by their best throughput under it, then the rest.
std::vector<size_t> rank(const std::vector<Measured>& results) {
  std::vector<size_t> order(results.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto score = [&](size_t i) {
    return results[i].best ? results[i].levels[*results[i].best].throughput : -1.0;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return score(a) > score(b); });
  return order;
}

// The ranked table, the best configuration and (--write-config) its config file.
void print_ranking(const SweepArgs& args, const std::vector<GridAxis>& grid,
                   const std::vector<Measured>& results, const std::vector<size_t>& order) {
  const double slo_p99_ms = *args.options.slo_p99_ms;
  std::printf(
      "\nconfigurations by throughput under p99 <= %g ms (no errors)%s:\n", slo_p99_ms,
      args.rounds > 1 ? (", medians of " + std::to_string(args.rounds) + " rounds").c_str() : "");
  for (size_t i : order) {
    std::string description;
    for (size_t a = 0; a < grid.size(); ++a)
      description += (a > 0 ? " " : "") + grid[a].key + "=" + results[i].values[a];
    if (const auto& best = results[i].best) {
      const Summary& s = results[i].levels[*best];
      std::printf("  %-80s %8.1f ok/s  p99 %7.2f ms  (%s)\n", description.c_str(), s.throughput,
                  s.latency.p99 / 1e3, s.label.c_str());
    } else {
      std::printf("  %-80s  did not meet the SLO at any level\n", description.c_str());
    }
  }
  const std::string& write_config = args.write_config;
  if (order.empty() || !results[order.front()].best) {
    std::printf("no configuration met the SLO%s\n",
                write_config.empty() ? "" : (": nothing written to " + write_config).c_str());
    return;
  }
  std::string best;
  for (size_t a = 0; a < grid.size(); ++a)
    best += " --set " + grid[a].key + "=" + results[order.front()].values[a];
  std::printf("best configuration under the SLO:%s\n", best.c_str());
  if (write_config.empty()) return;
  const Measured& m = results[order.front()];
  const Summary& s = m.levels[*m.best];
  char measured[160];
  std::snprintf(measured, sizeof measured, "%.1f requests/s at p99 %.2f ms (%s), SLO p99 <= %g ms",
                s.throughput, s.latency.p99 / 1e3, s.label.c_str(), slo_p99_ms);
  write_best_config(write_config, args.options.config_path, m.up_args, measured);
  std::printf("wrote the best configuration to %s\n", write_config.c_str());
}

// --csv: every round's levels of every configuration, with its grid values and round.
void write_sweep_csv(const std::string& path, const std::vector<GridAxis>& grid,
                     const std::vector<Measured>& results) {
  std::vector<Summary> rows;
  ExtraColumns extra;
  for (const GridAxis& axis : grid) extra.names.push_back(axis.key);
  extra.names.push_back("Round");
  for (const Measured& m : results) {
    for (size_t r = 0; r < m.rounds.size(); ++r) {
      for (const Summary& s : m.rounds[r]) {
        rows.push_back(s);
        extra.values.push_back(m.values);
        extra.values.back().push_back(std::to_string(r + 1));
      }
    }
  }
  write_csv(path, rows, extra);
}

// --json: the settings and the ranked configurations with their median levels.
void write_sweep_json(const SweepArgs& args, const std::vector<GridAxis>& grid,
                      const std::vector<Measured>& results, const std::vector<size_t>& order) {
  const LoadOptions& options = args.options;
  nlohmann::json doc;
  doc["settings"] = nlohmann::json::parse(settings_json(options, "private pipelines"));
  doc["settings"]["model"] = args.model;
  doc["settings"]["grid"] = args.grid_text;
  doc["settings"]["rounds"] = args.rounds;
  doc["slo_p99_ms"] = *options.slo_p99_ms;
  doc["configurations"] = nlohmann::json::array();
  for (size_t i : order) {
    nlohmann::json config = nlohmann::json::object();
    for (size_t a = 0; a < grid.size(); ++a) config[grid[a].key] = results[i].values[a];
    nlohmann::json entry = {
        {"config", config}, {"levels", nlohmann::json::array()}, {"best_level", nullptr}};
    for (const Summary& s : results[i].levels) {
      entry["levels"].push_back({{"label", s.label},
                                 {"concurrency", s.users},
                                 {"throughput_per_s", s.throughput},
                                 {"requests", s.requests},
                                 {"errors", s.errors()},
                                 {"p50_us", s.latency.p50},
                                 {"p99_us", s.latency.p99}});
    }
    if (results[i].best) entry["best_level"] = *results[i].best;
    doc["configurations"].push_back(entry);
  }
  std::ofstream file(options.json_path);
  file << doc.dump(2) << "\n";
  if (!file) throw std::runtime_error("cannot write '" + options.json_path + "'");
}

}  // namespace

int sweep_main(int argc, char** argv, std::string_view usage) {
  SweepArgs args;
  if (!parse_sweep_args(argc, argv, usage, args)) return 0;
  const std::vector<GridAxis> grid = parse_grid(args.grid_text);
  std::vector<Measured> results = plan_configurations(args, grid);
  service::install_stop_handlers();
  if (!measure_rounds(args, results)) return 1;
  take_medians(results, *args.options.slo_p99_ms);
  const std::vector<size_t> order = rank(results);
  print_ranking(args, grid, results, order);
  if (!args.options.csv_path.empty()) write_sweep_csv(args.options.csv_path, grid, results);
  if (!args.options.json_path.empty()) write_sweep_json(args, grid, results, order);
  if (service::stop_requested()) {
    std::fprintf(stderr, "seqpipe-bench sweep: interrupted; the report covers what ran\n");
    return 130;
  }
  return 0;
}

}  // namespace seqpipe::bench
