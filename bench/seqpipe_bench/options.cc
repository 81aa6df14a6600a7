#include "options.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "seqpipe/config/config.h"
#include "seqpipe/security/security.h"

namespace seqpipe::bench {

namespace {

using cli::UsageError;

std::pair<int, int> parse_range(const std::string& flag, const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) throw UsageError(flag + " needs FROM:TO, got '" + text + "'");
  const int from = cli::parse_number<int>(flag, text.substr(0, colon));
  const int to = cli::parse_number<int>(flag, text.substr(colon + 1));
  if (from < 1 || to < from) throw UsageError(flag + " needs 1 <= FROM <= TO, got '" + text + "'");
  return {from, to};
}

double positive(const std::string& flag, const std::string& text) {
  const double v = cli::parse_number<double>(flag, text);
  if (!(v > 0) || !std::isfinite(v))
    throw UsageError(flag + " must be a positive number, got '" + text + "'");
  return v;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::vector<LoadStep> parse_phases(const std::string& text, Arrival arrival) {
  std::vector<LoadStep> phases;
  std::string normalized = text;
  for (char& c : normalized) {
    if (c == '\n') c = ';';
  }
  std::stringstream phase_stream(normalized);
  std::string phase_text;
  while (std::getline(phase_stream, phase_text, ';')) {
    if (auto hash = phase_text.find('#'); hash != std::string::npos) phase_text.resize(hash);
    if (phase_text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "phase " + std::to_string(phases.size() + 1);
    LoadStep phase;
    phase.arrival = arrival;
    std::stringstream field_stream(phase_text);
    std::string field;
    while (std::getline(field_stream, field, ',')) {
      const auto b = field.find_first_not_of(" \t\r"), e = field.find_last_not_of(" \t\r");
      if (b == std::string::npos) continue;
      field = field.substr(b, e - b + 1);
      const auto eq = field.find('=');
      if (eq == std::string::npos)
        throw UsageError(where + ": expected key=value, got '" + field + "'");
      const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
      const std::string flag = where + " " + key;
      if (key == "users") {
        phase.users = cli::parse_number<int>(flag, value);
        if (phase.users < 1) throw UsageError(flag + " must be >= 1");
      } else if (key == "spawn") {
        phase.spawn_per_s = positive(flag, value);
      } else if (key == "rate") {
        phase.rate_per_s = positive(flag, value);
      } else if (key == "distribution") {
        if (value != "constant" && value != "poisson")
          throw UsageError(flag + " must be constant or poisson");
        phase.arrival = value == "poisson" ? Arrival::kPoisson : Arrival::kConstant;
      } else if (key == "duration") {
        phase.duration =
            std::chrono::microseconds(static_cast<int64_t>(positive(flag, value) * 1e6));
      } else if (key == "requests") {
        phase.requests = cli::parse_number<uint64_t>(flag, value);
      } else {
        throw UsageError(where + ": unknown key '" + key +
                         "' (users, spawn, rate, distribution, duration, requests)");
      }
    }
    if ((phase.users > 0) == (phase.rate_per_s > 0))
      throw UsageError(where + ": give users=N or rate=R (one of them)");
    if (phase.spawn_per_s > 0 && phase.users == 0)
      throw UsageError(where + ": spawn goes with users");
    if (phase.duration.count() == 0 && phase.requests == 0)
      throw UsageError(where + ": give duration=S or requests=N");
    phase.label = where + ": " +
                  (phase.users > 0 ? "users=" + std::to_string(phase.users)
                                   : "rate=" + std::to_string(static_cast<int>(phase.rate_per_s)));
    phases.push_back(phase);
  }
  if (phases.empty()) throw UsageError("--phases: no phase given");
  return phases;
}

void add_load_options(CLI::App& app, LoadOptions& o) {
  // Each value is checked as it is read, so a bad one is reported in its flag's words.
  auto add = [&app](const std::string& flag, auto take) {
    app.add_option_function<std::string>(
        flag, [flag, take](const std::string& value) { take(flag, value); });
  };
  app.add_option("--endpoint", o.endpoint);
  app.add_option("--config", o.config_path);
  cli::add_repeated(app, "--set", o.overrides);
  add("--concurrency", [&o](const std::string& flag, const std::string& v) {
    o.concurrency = cli::parse_number<int>(flag, v);
    if (*o.concurrency < 1) throw UsageError("--concurrency must be >= 1");
  });
  add("--concurrency-range", [&o](const std::string& flag, const std::string& v) {
    o.concurrency_range = parse_range(flag, v);
  });
  add("--min-gain", [&o](const std::string& flag, const std::string& v) {
    o.min_gain = cli::parse_number<double>(flag, v);
    if (o.min_gain < -1)
      throw UsageError("--min-gain must be >= -1 (a negative value runs every level)");
  });
  add("--request-rate",
      [&o](const std::string& flag, const std::string& v) { o.request_rate = positive(flag, v); });
  // Before --phases: a phase without distribution= takes this one.
  add("--distribution", [&o](const std::string&, const std::string& v) {
    if (v != "constant" && v != "poisson")
      throw UsageError("--distribution must be constant or poisson, got '" + v + "'");
    o.arrival = v == "poisson" ? Arrival::kPoisson : Arrival::kConstant;
  });
  add("--phases", [&o](const std::string&, const std::string& v) {
    o.phases = parse_phases(!v.empty() && v[0] == '@' ? read_file(v.substr(1)) : v, o.arrival);
  });
  add("--duration",
      [&o](const std::string& flag, const std::string& v) { o.duration_s = positive(flag, v); });
  add("--requests", [&o](const std::string& flag, const std::string& v) {
    o.requests = cli::parse_number<uint64_t>(flag, v);
    if (o.requests == 0) throw UsageError("--requests must be >= 1");
  });
  cli::add_number(app, "--warmup", o.warmup);
  app.add_option("--input", o.input_path);
  add("--words", [&o](const std::string& flag, const std::string& v) {
    std::tie(o.min_words, o.max_words) = parse_range(flag, v);
  });
  add("--input-count", [&o](const std::string& flag, const std::string& v) {
    o.input_count = cli::parse_number<size_t>(flag, v);
    if (o.input_count == 0) throw UsageError("--input-count must be >= 1");
  });
  cli::add_number(app, "--seed", o.seed);
  cli::add_number(app, "--max-new-tokens", o.params.max_new_tokens);
  cli::add_number(app, "--min-new-tokens", o.params.min_new_tokens);
  cli::add_number(app, "--num-beams", o.params.num_beams);
  add("--timeout-ms", [&o](const std::string& flag, const std::string& v) {
    o.timeout_ms = cli::parse_number<uint32_t>(flag, v);
    if (o.timeout_ms == 0) throw UsageError("--timeout-ms must be >= 1");
  });
  add("--window-s",
      [&o](const std::string& flag, const std::string& v) { o.window_s = positive(flag, v); });
  app.add_option("--json", o.json_path);
  app.add_option("--csv", o.csv_path);
  add("--slo-p99-ms",
      [&o](const std::string& flag, const std::string& v) { o.slo_p99_ms = positive(flag, v); });
  cli::add_number(app, "--max-records", o.max_records);
  app.add_flag_callback("--no-progress", [&o] { o.progress = false; });
}

void finish_load_options(LoadOptions& o, bool sweep_subcommand) {
  const int modes = (o.concurrency ? 1 : 0) + (o.concurrency_range ? 1 : 0) +
                    (o.request_rate ? 1 : 0) + (o.phases.empty() ? 0 : 1);
  if (sweep_subcommand) {
    if (o.concurrency || o.request_rate || !o.phases.empty()) {
      throw UsageError(
          "sweep runs closed-loop levels: use --concurrency-range, not "
          "--concurrency/--request-rate/--phases");
    }
    if (!o.concurrency_range) o.concurrency_range = std::pair{1, 16};
    if (o.duration_s == 0 && o.requests == 0) o.duration_s = 3;
  } else {
    if (modes == 0)
      throw UsageError(
          "give the load: --concurrency N, --concurrency-range A:B, --request-rate R or --phases "
          "SPEC");
    if (modes > 1)
      throw UsageError(
          "give only one of --concurrency, --concurrency-range, --request-rate, --phases");
    if (!o.phases.empty() && (o.duration_s > 0 || o.requests > 0)) {
      throw UsageError("--phases carry their own duration=/requests=; drop --duration/--requests");
    }
    if (o.phases.empty() && o.duration_s == 0 && o.requests == 0) o.duration_s = 10;
  }
  if (o.params.max_new_tokens < 1) throw UsageError("--max-new-tokens must be >= 1");
  if (o.params.min_new_tokens < 0 || o.params.min_new_tokens > o.params.max_new_tokens) {
    throw UsageError("--min-new-tokens must be in [0, --max-new-tokens]");
  }
  if (o.params.num_beams < 1) throw UsageError("--num-beams must be >= 1");
  if (!o.input_path.empty() && !std::filesystem::exists(o.input_path)) {
    throw UsageError("--input: no such file '" + o.input_path + "'");
  }
  if (o.max_records == 0) {
    // Enough for every send the stop conditions allow (reserve() only maps the memory); a rate
    // we cannot bound (closed loop on time alone) gets room for 20k requests a second.
    double bound = 0;
    auto step_bound = [&](double seconds, uint64_t requests, double rate) {
      if (requests > 0) return static_cast<double>(requests);
      return seconds * (rate > 0 ? rate * 1.2 + 100 : 20000);
    };
    if (!o.phases.empty()) {
      for (const LoadStep& p : o.phases) {
        bound +=
            step_bound(static_cast<double>(p.duration.count()) / 1e6, p.requests, p.rate_per_s);
      }
    } else {
      const int levels = o.concurrency_range
                             ? 2 + static_cast<int>(std::log2(o.concurrency_range->second /
                                                              o.concurrency_range->first))
                             : 1;
      bound = levels * step_bound(o.duration_s, o.requests, o.request_rate.value_or(0));
    }
    o.max_records = static_cast<uint64_t>(std::min(bound, 5e7)) + 1;
  }
  o.progress = o.progress && ::isatty(STDERR_FILENO);
}

std::string resolve_endpoint(const LoadOptions& o) {
  if (!o.endpoint.empty()) return o.endpoint;
  return config::client_endpoints(config::load_pipeline_config(o.config_path, o.overrides).config);
}

std::vector<std::string> load_inputs(const LoadOptions& o) {
  if (!o.input_path.empty()) return read_inputs(o.input_path);
  return generate_inputs(o.input_count, o.min_words, o.max_words, o.seed);
}

RunOptions make_run_options(const LoadOptions& o, std::string endpoint) {
  RunOptions r;
  r.endpoint = std::move(endpoint);
  r.params = o.params;
  r.timeout_ms = o.timeout_ms;
  r.inputs = load_inputs(o);
  r.max_records = o.max_records;
  r.progress = o.progress;
  r.seed = o.seed;
  // The config's client keys, as `seqpipe send` (the sweep's pipelines start from it too).
  r.curve = security::client_keys(
      config::load_pipeline_config(o.config_path, o.overrides).config.security);
  return r;
}

std::string settings_json(const LoadOptions& o, const std::string& endpoint) {
  nlohmann::json j = {{"endpoint", endpoint},
                      {"max_new_tokens", o.params.max_new_tokens},
                      {"min_new_tokens", o.params.min_new_tokens},
                      {"num_beams", o.params.num_beams},
                      {"timeout_ms", o.timeout_ms},
                      {"duration_s", o.duration_s},
                      {"requests", o.requests},
                      {"warmup", o.warmup}};
  if (o.concurrency) j["concurrency"] = *o.concurrency;
  if (o.concurrency_range)
    j["concurrency_range"] = {o.concurrency_range->first, o.concurrency_range->second};
  if (o.request_rate) {
    j["request_rate"] = *o.request_rate;
    j["distribution"] = o.arrival == Arrival::kPoisson ? "poisson" : "constant";
  }
  if (!o.input_path.empty()) {
    j["input"] = o.input_path;
  } else {
    j["words"] = {o.min_words, o.max_words};
    j["input_count"] = o.input_count;
    j["seed"] = o.seed;
  }
  return j.dump();
}

}  // namespace seqpipe::bench
