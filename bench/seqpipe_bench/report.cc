#include "report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace seqpipe::bench {

namespace {

// Nearest rank: the smallest value with at least p of the sample at or below it.
double percentile(const std::vector<uint32_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

// Counts, latency and stage means of the records `take` selects; seconds and throughput are
// left to the caller.
LatencySummary summarize_latencies(std::vector<uint32_t>& latencies) {
  LatencySummary l;
  if (latencies.empty()) return l;
  std::sort(latencies.begin(), latencies.end());
  l.count = latencies.size();
  double total = 0;
  for (uint32_t v : latencies) total += v;
  l.mean = total / static_cast<double>(l.count);
  l.p50 = percentile(latencies, 0.50);
  l.p90 = percentile(latencies, 0.90);
  l.p95 = percentile(latencies, 0.95);
  l.p99 = percentile(latencies, 0.99);
  l.p999 = percentile(latencies, 0.999);
  l.max = latencies.back();
  return l;
}

template <typename Take>
Summary summarize(const std::vector<RequestRecord>& records, Take take) {
  Summary s;
  std::vector<uint32_t> latencies, error_latencies, refusal_latencies;
  constexpr int kRefused = kFirstWireError + static_cast<int>(protocol::ErrorCode::kOverloaded);
  double sums[9] = {};
  for (const RequestRecord& r : records) {
    if (!take(r)) continue;
    ++s.requests;
    ++s.by_status[static_cast<size_t>(r.status)];
    if (r.status >= kFirstWireError && r.status < kNoReply) error_latencies.push_back(r.latency_us);
    if (r.status == kRefused) refusal_latencies.push_back(r.latency_us);
    if (r.status != kOk) continue;
    latencies.push_back(r.latency_us);
    const protocol::Timings& t = r.timings;
    const double stages = static_cast<double>(t.queue_us + t.tokenize_us + t.batch_wait_us +
                                              t.encode_us + t.decode_us + t.postprocess_us);
    const double values[9] = {
        static_cast<double>(r.client_send_us),
        static_cast<double>(t.queue_us),
        static_cast<double>(t.tokenize_us),
        static_cast<double>(t.batch_wait_us),
        static_cast<double>(t.encode_us),
        static_cast<double>(t.decode_us),
        static_cast<double>(t.postprocess_us),
        static_cast<double>(t.total_us),
        static_cast<double>(r.latency_us) - static_cast<double>(r.client_send_us) - stages};
    for (int i = 0; i < 9; ++i) sums[i] += values[i];
  }
  s.ok = latencies.size();
  s.error_latency = summarize_latencies(error_latencies);
  s.refusal_latency = summarize_latencies(refusal_latencies);
  if (s.ok == 0) return s;
  const double n = static_cast<double>(s.ok);
  StageMeans& m = s.stages;
  double* means[9] = {&m.client_send, &m.queue,       &m.tokenize,     &m.batch_wait, &m.encode,
                      &m.decode,      &m.postprocess, &m.server_total, &m.overhead};
  for (int i = 0; i < 9; ++i) *means[i] = sums[i] / n;
  s.latency = summarize_latencies(latencies);
  return s;
}

void set_rate(Summary& s, double seconds) {
  s.seconds = seconds;
  s.throughput = seconds > 0 ? static_cast<double>(s.ok) / seconds : 0;
}

std::string errors_text(const Summary& s) {
  std::string text;
  for (int status = 1; status < kStatusCount; ++status) {
    if (s.by_status[static_cast<size_t>(status)] == 0) continue;
    if (!text.empty()) text += ' ';
    text += status_name(status) + "=" + std::to_string(s.by_status[static_cast<size_t>(status)]);
  }
  return text.empty() ? "-" : text;
}

nlohmann::json to_json(const Summary& s) {
  nlohmann::json errors = nlohmann::json::object();
  for (int status = 1; status < kStatusCount; ++status) {
    if (s.by_status[static_cast<size_t>(status)] > 0)
      errors[status_name(status)] = s.by_status[static_cast<size_t>(status)];
  }
  const LatencySummary& l = s.latency;
  const StageMeans& m = s.stages;
  nlohmann::json j = {
      {"label", s.label},
      {"requests", s.requests},
      {"ok", s.ok},
      {"errors", s.errors()},
      {"errors_by_code", errors},
      {"seconds", s.seconds},
      {"throughput_per_s", s.throughput},
      {"latency_us",
       {{"count", l.count},
        {"mean", l.mean},
        {"p50", l.p50},
        {"p90", l.p90},
        {"p95", l.p95},
        {"p99", l.p99},
        {"p99.9", l.p999},
        {"max", l.max}}},
      {"error_latency_us",
       {{"count", s.error_latency.count},
        {"p50", s.error_latency.p50},
        {"p99", s.error_latency.p99},
        {"max", s.error_latency.max}}},
      {"refusal_latency_us",
       {{"count", s.refusal_latency.count},
        {"p50", s.refusal_latency.p50},
        {"p99", s.refusal_latency.p99},
        {"max", s.refusal_latency.max}}},
      {"stages_mean_us",
       {{"client_send", m.client_send},
        {"queue", m.queue},
        {"tokenize", m.tokenize},
        {"batch_wait", m.batch_wait},
        {"encode", m.encode},
        {"decode", m.decode},
        {"postprocess", m.postprocess},
        {"server_total", m.server_total},
        {"overhead", m.overhead}}},
  };
  if (s.users > 0) j["concurrency"] = s.users;
  if (s.rate_per_s > 0) j["request_rate_per_s"] = s.rate_per_s;
  return j;
}

}  // namespace

void print_summaries(std::FILE* out, const char* title, const std::vector<Summary>& rows) {
  std::fprintf(out, "%s\n", title);
  std::fprintf(out, "%-26s %8s %8s %9s %8s %8s %8s %8s %8s %8s | %7s %7s %7s %7s %7s %7s %7s  %s\n",
               "", "requests", "ok", "ok/s", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "p99.9 ms",
               "mean ms", "queue", "tokeniz", "b.wait", "encode", "decode", "postpr", "overhd",
               "errors");
  for (const Summary& s : rows) {
    const LatencySummary& l = s.latency;
    const StageMeans& m = s.stages;
    std::fprintf(out,
                 "%-26s %8llu %8llu %9.1f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f | %7.2f %7.2f %7.2f "
                 "%7.2f %7.2f %7.2f "
                 "%7.2f  %s\n",
                 s.label.c_str(), static_cast<unsigned long long>(s.requests),
                 static_cast<unsigned long long>(s.ok), s.throughput, l.p50 / 1e3, l.p90 / 1e3,
                 l.p95 / 1e3, l.p99 / 1e3, l.p999 / 1e3, l.mean / 1e3, m.queue / 1e3,
                 m.tokenize / 1e3, m.batch_wait / 1e3, m.encode / 1e3, m.decode / 1e3,
                 m.postprocess / 1e3, m.overhead / 1e3, errors_text(s).c_str());
  }
}

namespace {

std::string format_number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", v);
  return buffer;
}

}  // namespace

std::vector<Summary> summarize_steps(const RunResult& run) {
  std::vector<Summary> out;
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const auto step = static_cast<int16_t>(i);
    Summary s = summarize(run.records, [&](const RequestRecord& r) { return r.step == step; });
    int64_t last_done = run.step_start_us[i];
    for (const RequestRecord& r : run.records) {
      if (r.step == step) last_done = std::max(last_done, r.done_us);
    }
    set_rate(s, static_cast<double>(last_done - run.step_start_us[i]) / 1e6);
    s.label = run.steps[i].label;
    s.users = run.steps[i].users;
    s.rate_per_s = run.steps[i].rate_per_s;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Summary> summarize_windows(const RunResult& run, double window_s) {
  std::vector<Summary> out;
  if (window_s <= 0 || run.records.empty()) return out;
  const auto window_us = static_cast<int64_t>(window_s * 1e6);
  const int64_t first = run.records.front().sent_us;
  // One past the end: requests given up when the run ended carry done_us == end_us.
  const int64_t run_end = run.end_us + 1;
  for (int64_t begin = first; begin < run_end; begin += window_us) {
    const int64_t end = std::min(begin + window_us, run_end);
    Summary s = summarize(
        run.records, [&](const RequestRecord& r) { return r.done_us >= begin && r.done_us < end; });
    set_rate(s, static_cast<double>(end - begin) / 1e6);
    s.label = format_number(static_cast<double>(begin - first) / 1e6) + "-" +
              format_number(static_cast<double>(end - first) / 1e6) + " s";
    out.push_back(std::move(s));
  }
  // The run ends with a reply: a trailing empty window is only the clock's last tick.
  if (out.size() > 1 && out.back().requests == 0) out.pop_back();
  return out;
}

Summary summarize_all(const RunResult& run) {
  Summary s = summarize(run.records, [](const RequestRecord&) { return true; });
  int64_t last_done = 0;
  for (const RequestRecord& r : run.records) last_done = std::max(last_done, r.done_us);
  set_rate(s, run.records.empty()
                  ? 0
                  : static_cast<double>(last_done - run.records.front().sent_us) / 1e6);
  s.label = "overall";
  return s;
}

Summary median_of(const std::vector<Summary>& repeats) {
  if (repeats.empty()) return {};
  auto median = [&](auto field) {
    std::vector<double> v;
    for (const Summary& s : repeats) v.push_back(field(s));
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  Summary m = repeats.front();
  m.requests = m.ok = 0;
  m.by_status = {};
  for (const Summary& s : repeats) {
    m.requests += s.requests;
    m.ok += s.ok;
    for (size_t i = 0; i < m.by_status.size(); ++i) m.by_status[i] += s.by_status[i];
  }
  m.seconds = median([](const Summary& s) { return s.seconds; });
  m.throughput = median([](const Summary& s) { return s.throughput; });
  LatencySummary& l = m.latency;
  l.count = m.ok;
  l.mean = median([](const Summary& s) { return s.latency.mean; });
  l.p50 = median([](const Summary& s) { return s.latency.p50; });
  l.p90 = median([](const Summary& s) { return s.latency.p90; });
  l.p95 = median([](const Summary& s) { return s.latency.p95; });
  l.p99 = median([](const Summary& s) { return s.latency.p99; });
  l.p999 = median([](const Summary& s) { return s.latency.p999; });
  l.max = median([](const Summary& s) { return s.latency.max; });
  StageMeans& st = m.stages;
  st.client_send = median([](const Summary& s) { return s.stages.client_send; });
  st.queue = median([](const Summary& s) { return s.stages.queue; });
  st.tokenize = median([](const Summary& s) { return s.stages.tokenize; });
  st.batch_wait = median([](const Summary& s) { return s.stages.batch_wait; });
  st.encode = median([](const Summary& s) { return s.stages.encode; });
  st.decode = median([](const Summary& s) { return s.stages.decode; });
  st.postprocess = median([](const Summary& s) { return s.stages.postprocess; });
  st.server_total = median([](const Summary& s) { return s.stages.server_total; });
  st.overhead = median([](const Summary& s) { return s.stages.overhead; });
  return m;
}

std::optional<size_t> best_under_slo(const std::vector<Summary>& steps, double slo_p99_ms) {
  std::optional<size_t> best;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Summary& s = steps[i];
    if (s.ok == 0 || s.errors() > 0 || s.latency.p99 > slo_p99_ms * 1e3) continue;
    if (!best || s.throughput > steps[*best].throughput) best = i;
  }
  return best;
}

void print_table(std::FILE* out, const std::vector<Summary>& steps,
                 const std::vector<Summary>& windows, const Summary& overall,
                 std::optional<double> slo_p99_ms) {
  std::fprintf(out,
               "latencies: client-side, successful replies; stage columns: mean ms from the "
               "replies' timings_us "
               "(overhd = latency - stages: transport, hubs, client)\n");
  if (!windows.empty()) print_summaries(out, "per window (replies by arrival time):", windows);
  print_summaries(out, "per step:", steps);
  print_summaries(out, "", {overall});
  if (const LatencySummary& e = overall.error_latency; e.count > 0) {
    std::fprintf(out, "error replies: %llu, latency p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
                 static_cast<unsigned long long>(e.count), e.p50 / 1e3, e.p99 / 1e3, e.max / 1e3);
  }
  if (const LatencySummary& r = overall.refusal_latency; r.count > 0) {
    std::fprintf(
        out, "of them refused (overloaded): %llu, latency p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
        static_cast<unsigned long long>(r.count), r.p50 / 1e3, r.p99 / 1e3, r.max / 1e3);
  }
  if (slo_p99_ms) {
    if (auto best = best_under_slo(steps, *slo_p99_ms)) {
      std::fprintf(out, "SLO p99 <= %g ms: best %s, %.1f ok/s at p99 %.2f ms\n", *slo_p99_ms,
                   steps[*best].label.c_str(), steps[*best].throughput,
                   steps[*best].latency.p99 / 1e3);
    } else {
      std::fprintf(out, "SLO p99 <= %g ms: no step met it (with no errors)\n", *slo_p99_ms);
    }
  }
}

void write_json(const std::string& path, const std::string& settings_json,
                const std::vector<Summary>& steps, const std::vector<Summary>& windows,
                const Summary& overall, std::optional<double> slo_p99_ms) {
  nlohmann::json doc;
  doc["settings"] = nlohmann::json::parse(settings_json);
  doc["steps"] = nlohmann::json::array();
  for (const Summary& s : steps) doc["steps"].push_back(to_json(s));
  doc["windows"] = nlohmann::json::array();
  for (const Summary& s : windows) doc["windows"].push_back(to_json(s));
  doc["overall"] = to_json(overall);
  if (slo_p99_ms) {
    nlohmann::json slo = {{"p99_ms", *slo_p99_ms}, {"best_step", nullptr}};
    if (auto best = best_under_slo(steps, *slo_p99_ms)) {
      slo["best_step"] = *best;
      slo["best_label"] = steps[*best].label;
      slo["best_throughput_per_s"] = steps[*best].throughput;
    }
    doc["slo"] = slo;
  }
  std::ofstream file(path);
  file << doc.dump(2) << "\n";
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
}

void write_csv(const std::string& path, const std::vector<Summary>& rows,
               const ExtraColumns& extra) {
  std::ofstream file(path);
  for (const std::string& name : extra.names) file << name << ",";
  // perf_analyzer's names first (its "Server Queue" etc. mapped onto seqpipe's stages), then ours.
  file << "Concurrency,Request Rate,Inferences/Second,Client Send,Network+Server Send/Recv,Server "
          "Queue,"
          "Server Compute Input,Server Compute Infer,Server Compute Output,p50 latency,p90 "
          "latency,p95 latency,"
          "p99 latency,p99.9 latency,Avg latency,Requests,Errors,Queue,Tokenize,Batch "
          "Wait,Encode,Decode,"
          "Postprocess,Server Total,Label\n";
  for (size_t row = 0; row < rows.size(); ++row) {
    const Summary& s = rows[row];
    if (row < extra.values.size()) {
      for (const std::string& value : extra.values[row]) file << value << ",";
    }
    const StageMeans& m = s.stages;
    const LatencySummary& l = s.latency;
    char line[1024];
    std::snprintf(line, sizeof line,
                  "%d,%.2f,%.2f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%llu,%"
                  "llu,%.0f,%.0f,%.0f,"
                  "%.0f,%.0f,%.0f,%.0f,",
                  s.users, s.rate_per_s, s.throughput, m.client_send, m.overhead,
                  m.queue + m.batch_wait, m.tokenize, m.encode + m.decode, m.postprocess, l.p50,
                  l.p90, l.p95, l.p99, l.p999, l.mean, static_cast<unsigned long long>(s.requests),
                  static_cast<unsigned long long>(s.errors()), m.queue, m.tokenize, m.batch_wait,
                  m.encode, m.decode, m.postprocess, m.server_total);
    std::string label = s.label;
    std::replace(label.begin(), label.end(), ',', ';');
    file << line << label << "\n";
  }
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
}

}  // namespace seqpipe::bench
