#include "load.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <stdexcept>

#include "report.h"
#include "seqpipe/runtime/service.h"

namespace seqpipe::bench {

namespace {

// Everyday words and common misspellings: generated inputs look like what the speller serves.
constexpr const char* kWords[] = {
    "the",      "a",        "teh",      "speling",    "is",         "bad",       "hello",
    "world",    "i",        "cant",     "beleive",    "wether",     "recieve",   "definately",
    "seperate", "occured",  "untill",   "which",      "their",      "there",     "they're",
    "your",     "you're",   "weird",    "wierd",      "friend",     "freind",    "because",
    "becuase",  "tomorrow", "tommorow", "acommodate", "neccessary", "goverment", "enviroment",
    "we",       "went",     "to",       "store",      "and",        "bought",    "some",
    "apples",   "for",      "dinner",   "it",         "was",        "realy",     "good",
    "thanks",   "alot",     "see",      "you",        "later",      "my",        "cat",
    "dgo",      "likes",    "playing",  "outside",    "in",         "rain",      "sun",
    "morning",  "evening",  "coffee",   "tea",        "please",     "send",      "me",
    "report",   "meeting",  "agenda",   "calender",   "schedule",   "prefered",  "language",
    "begining", "finaly",   "writting",
};

constexpr int8_t kPending = -1;  // sent, no reply yet

}  // namespace

std::vector<std::string> read_inputs(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the input file '" + path + "'");
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) texts.push_back(line);
  }
  if (texts.empty()) throw std::runtime_error("the input file '" + path + "' holds no text");
  return texts;
}

std::vector<std::string> generate_inputs(size_t count, int min_words, int max_words,
                                         uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int> words(min_words, max_words);
  std::uniform_int_distribution<size_t> word(0, std::size(kWords) - 1);
  std::vector<std::string> texts(count);
  for (std::string& text : texts) {
    const int n = words(random);
    for (int i = 0; i < n; ++i) {
      if (i > 0) text += ' ';
      text += kWords[word(random)];
    }
  }
  return texts;
}

std::string status_name(int status) {
  if (status == kOk) return "ok";
  if (status == kNoReply) return "no_reply";
  if (status == kBadReply) return "bad_reply";
  if (status == kSendFailed) return "send_failed";
  if (status >= kFirstWireError && status < kNoReply) {
    return std::string(
        protocol::wire_name(static_cast<protocol::ErrorCode>(status - kFirstWireError)));
  }
  return "status_" + std::to_string(status);
}

// A load generator measures the server: no retry of a slow request (it would be computed twice
// and count as load); a dropped gateway connection still moves its requests to the next gateway.
Runner::Runner(RunOptions options)
    : options_(std::move(options)),
      client_(options_.endpoint,
              {.retry_after = std::chrono::milliseconds(0), .curve = options_.curve}) {
  if (options_.inputs.empty()) throw std::invalid_argument("no input texts");
  // Every record is preallocated here: the measurement loop appends without allocating.
  result_.records.reserve(options_.max_records);
  request_.params = options_.params;
  request_.timeout_ms = options_.timeout_ms;
  request_.id = std::string();
  request_.id->reserve(24);
  request_.texts.resize(1);
  // A probe first: no gateway, or params it refuses, is an error now rather than a table of
  // failures later.
  protocol::Request probe = request_;
  probe.id = "probe";
  probe.texts[0] = options_.inputs[0];
  const auto answer = client_.call(probe, std::chrono::milliseconds(options_.timeout_ms + 2000));
  if (const auto* e = std::get_if<protocol::Error>(&answer)) {
    throw std::runtime_error("no answer from the gateway at " + options_.endpoint + ": " +
                             e->message);
  }
  if (const auto& reply = std::get<protocol::Reply>(answer); !reply.ok) {
    throw std::runtime_error("the gateway at " + options_.endpoint + " refused a probe request: " +
                             std::string(protocol::wire_name(reply.error->code)) + ": " +
                             reply.error->message);
  }
  start_ = Clock::now();
  progress_at_ = start_;
  next_progress_ = start_ + std::chrono::seconds(1);
}

int64_t Runner::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
}

void Runner::send_one(int16_t step) {
  const uint64_t index = result_.records.size();
  char id[24];
  id[0] = 'r';
  const auto end = std::to_chars(id + 1, id + sizeof id, index).ptr;
  request_.id->assign(id, end);
  request_.texts[0] = options_.inputs[next_input_++ % options_.inputs.size()];

  RequestRecord& record = result_.records.emplace_back();
  record.step = step;
  const auto before = Clock::now();
  record.sent_us = std::chrono::duration_cast<std::chrono::microseconds>(before - start_).count();
  const bool sent = client_.submit(request_).has_value();
  record.client_send_us = static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - before).count());
  if (sent) {
    record.status = kPending;
    ++in_flight_;
  } else {
    record.status = kSendFailed;
    record.done_us = record.sent_us;
    ++failed_;
  }
}

int Runner::collect(std::chrono::microseconds wait) {
  int taken = 0;
  // Round up: waking a little late only delays the next send, never a reply's timestamp.
  auto wait_ms = std::chrono::milliseconds((wait.count() + 999) / 1000);
  while (true) {
    auto answer = client_.receive(wait_ms);
    if (!answer) break;
    wait_ms = std::chrono::milliseconds(0);  // then take whatever else is already there
    const auto received = Clock::now();
    const int64_t done_us =
        std::chrono::duration_cast<std::chrono::microseconds>(received - start_).count();
    auto* reply = std::get_if<protocol::Reply>(&*answer);
    if (reply == nullptr) {
      ++failed_;  // undecodable: no id to match, so the request is left to time out as well
      continue;
    }
    // Our ids are "r<index>"; anything else is not ours.
    uint64_t index = 0;
    const std::string& id = reply->id;
    if (id.size() < 2 || id[0] != 'r' ||
        std::from_chars(id.data() + 1, id.data() + id.size(), index).ptr != id.data() + id.size() ||
        index >= result_.records.size()) {
      continue;
    }
    RequestRecord& record = result_.records[index];
    if (record.status != kPending) continue;  // already given up on (kNoReply)
    record.done_us = done_us;
    record.latency_us = static_cast<uint32_t>(done_us - record.sent_us);
    record.timings = reply->timings;
    if (reply->ok) {
      record.status = kOk;
      ++answered_;
    } else {
      record.status = static_cast<int8_t>(kFirstWireError + static_cast<int>(reply->error->code));
      ++failed_;
    }
    --in_flight_;
    ++taken;
  }
  return taken;
}

void Runner::expire(int64_t now) {
  const int64_t limit_us = (static_cast<int64_t>(options_.timeout_ms) + 2000) * 1000;
  auto& records = result_.records;
  while (oldest_pending_ < records.size()) {
    RequestRecord& record = records[oldest_pending_];
    if (record.status == kPending) {
      if (now - record.sent_us < limit_us) return;
      record.status = kNoReply;
      record.done_us = now;
      --in_flight_;
      ++failed_;
    }
    ++oldest_pending_;
  }
}

bool Runner::run_step(const LoadStep& step) {
  const auto step_index = static_cast<int16_t>(result_.steps.size());
  result_.steps.push_back(step);
  const int64_t step_start = now_us();
  result_.step_start_us.push_back(step_start);
  const int64_t duration_us = step.duration.count();
  // Users carry over from the previous step; with a spawn rate they move towards step.users.
  const double from_users = step.spawn_per_s > 0 ? current_users_ : step.users;
  std::mt19937_64 random(options_.seed + static_cast<uint64_t>(step_index));
  std::exponential_distribution<double> poisson_gap(step.rate_per_s > 0 ? step.rate_per_s : 1.0);
  int64_t next_send_us = step_start;
  uint64_t sent = 0;
  bool keep_going = true;

  while (true) {
    if (service::stop_requested()) {
      keep_going = false;
      break;
    }
    const int64_t now = now_us();
    expire(now);
    const int64_t elapsed = now - step_start;
    if (duration_us > 0 && elapsed >= duration_us) break;
    if (step.requests > 0 && sent >= step.requests) break;
    if (result_.records.size() == result_.records.capacity()) {
      std::fprintf(
          stderr,
          "seqpipe-bench: %zu requests recorded, the capacity; stopping (raise --max-records)\n",
          result_.records.size());
      keep_going = false;
      break;
    }
    if (options_.progress && Clock::now() >= next_progress_) print_progress(false);
    const int64_t until_end = duration_us > 0 ? duration_us - elapsed : 1000000;

    if (step.users > 0) {
      double users = step.users;
      if (step.spawn_per_s > 0) {
        const double moved = step.spawn_per_s * static_cast<double>(elapsed) / 1e6;
        users = step.users > from_users ? std::min<double>(step.users, from_users + moved)
                                        : std::max<double>(step.users, from_users - moved);
      }
      current_users_ = users;
      if (static_cast<double>(in_flight_) < std::floor(users + 1e-9)) {
        send_one(step_index);
        ++sent;
        continue;
      }
      // Wait for a reply; wake up at least every 10 ms while users are still being spawned.
      const int64_t wait = step.spawn_per_s > 0 ? std::min<int64_t>(until_end, 10000) : until_end;
      collect(std::chrono::microseconds(std::min<int64_t>(wait, 100000)));
    } else {
      if (now >= next_send_us) {
        send_one(step_index);
        ++sent;
        const double gap_s =
            step.arrival == Arrival::kPoisson ? poisson_gap(random) : 1.0 / step.rate_per_s;
        next_send_us += static_cast<int64_t>(gap_s * 1e6);
        collect(std::chrono::microseconds(0));
        continue;
      }
      collect(
          std::chrono::microseconds(std::min<int64_t>({next_send_us - now, until_end, 100000})));
    }
  }
  if (!keep_going || step.drain_after) drain();
  return keep_going;
}

void Runner::drain() {
  const auto give_up = Clock::now() + std::chrono::milliseconds(options_.timeout_ms + 2000);
  while (in_flight_ > 0 && Clock::now() < give_up) {
    collect(std::chrono::microseconds(100000));
    expire(now_us());
    if (options_.progress && Clock::now() >= next_progress_) print_progress(false);
  }
  const int64_t now = now_us();
  for (RequestRecord& record : result_.records) {
    if (record.status != kPending) continue;
    record.status = kNoReply;
    record.done_us = now;
    ++failed_;
  }
  in_flight_ = 0;
  result_.end_us = now;
}

RunResult Runner::take_result() {
  drain();
  if (options_.progress) print_progress(true);
  return std::move(result_);
}

void Runner::print_progress(bool final_line) {
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - progress_at_).count();
  const double rate =
      seconds > 0 ? static_cast<double>(answered_ - progress_answered_) / seconds : 0;
  progress_answered_ = answered_;
  progress_at_ = now;
  next_progress_ = now + std::chrono::seconds(1);
  const LoadStep* step = result_.steps.empty() ? nullptr : &result_.steps.back();
  std::fprintf(
      stderr, "\r\033[K%.1f s | %s | sent %zu | ok %llu | errors %llu | in flight %llu | %.0f ok/s",
      static_cast<double>(now_us()) / 1e6, step ? step->label.c_str() : "", result_.records.size(),
      static_cast<unsigned long long>(answered_), static_cast<unsigned long long>(failed_),
      static_cast<unsigned long long>(in_flight_), rate);
  if (final_line) std::fprintf(stderr, "\n");
}

void run_concurrency_sweep(Runner& runner, const ConcurrencySweep& sweep) {
  double last_throughput = 0;
  for (int users = sweep.from;;) {
    LoadStep level = sweep.level;
    level.users = users;
    level.rate_per_s = 0;
    level.drain_after = true;
    level.label = "concurrency " + std::to_string(users);
    if (!runner.run_step(level)) return;
    // Summarise only the level just run: the earlier ones are finished and drained.
    RunResult view;
    view.steps = {level};
    view.step_start_us = {runner.result().step_start_us.back()};
    const auto step = static_cast<int16_t>(runner.result().steps.size() - 1);
    for (const RequestRecord& r : runner.result().records) {
      if (r.step == step) view.records.push_back(r);
    }
    for (RequestRecord& r : view.records) r.step = 0;
    const Summary s = summarize_steps(view).front();
    if (users >= sweep.to) return;
    if (last_throughput > 0 && s.throughput < last_throughput * (1 + sweep.min_gain)) return;
    if (sweep.slo_p99_ms && s.latency.p99 > *sweep.slo_p99_ms * 1e3) return;
    last_throughput = s.throughput;
    users = std::min(users * 2, sweep.to);
  }
}

}  // namespace seqpipe::bench
