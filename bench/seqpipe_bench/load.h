#pragma once
// The load generator's measurement side: what to send (a pool of input texts), how to send it
// (steps: closed loop at a number of users, or open loop at a request rate), and the loop that
// keeps requests in flight on one pipelined client socket and records each one.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "seqpipe/client.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::bench {

using Clock = std::chrono::steady_clock;

// The input texts requests cycle through: read from a file (one text a line, blank lines
// skipped) or generated, `count` texts of a uniform number of words in [min_words, max_words]
// drawn from a built-in word list with `seed` (the same seed gives the same texts).
std::vector<std::string> read_inputs(const std::string& path);
std::vector<std::string> generate_inputs(size_t count, int min_words, int max_words, uint64_t seed);

enum class Arrival { kConstant, kPoisson };

// One stretch of load. Closed loop (users > 0): at most `users` requests in flight, a new one
// sent as soon as one is answered; with spawn_per_s > 0 the number of users moves from the
// previous step's towards `users` at that many per second (Locust's spawn rate). Open loop
// (rate_per_s > 0): requests sent on a schedule whatever the replies do, every 1/rate seconds
// (constant) or with exponential gaps of mean 1/rate (poisson).
struct LoadStep {
  int users = 0;
  double spawn_per_s = 0;
  double rate_per_s = 0;
  Arrival arrival = Arrival::kConstant;
  // The step ends after `duration` or after `requests` sends, whichever comes first (0: no limit
  // of that kind; at least one is set).
  std::chrono::microseconds duration{0};
  uint64_t requests = 0;
  // Wait for every reply of this step before the next one starts (a concurrency sweep's levels
  // are measured apart); phases run back to back instead.
  bool drain_after = false;
  std::string label;  // how reports name the step ("concurrency 4", "phase 2: users=8")
};

// What the client side of one request saw. Times are microseconds from the run's start.
// Status kOk, a wire error code, or one of the client-side outcomes below.
struct RequestRecord {
  int64_t sent_us = 0;
  int64_t done_us = -1;  // -1: no reply
  uint32_t latency_us = 0;
  uint32_t client_send_us = 0;  // encoding + handing to the socket
  protocol::Timings timings;    // the reply's per-stage timings (zeros for client-side failures)
  int16_t step = 0;
  int8_t status = 0;  // see RequestStatus
};

// kOk, then one value per protocol::ErrorCode (offset by 1), then the client-side outcomes.
enum RequestStatus : int8_t {
  kOk = 0,
  kFirstWireError = 1,  // kFirstWireError + static_cast<int>(protocol::ErrorCode)
  kNoReply = 16,        // no reply within --timeout-ms plus a grace period
  kBadReply = 17,       // the reply could not be decoded
  kSendFailed = 18,     // the socket refused the request
};
inline constexpr int kStatusCount = 19;
std::string status_name(int status);

struct RunOptions {
  std::string endpoint;
  protocol::GenerateParams params;
  uint32_t timeout_ms = 10000;
  std::vector<std::string> inputs;
  uint64_t max_records = 0;    // capacity preallocated for records (every send takes one)
  bool progress = false;       // a live progress line on stderr
  uint64_t seed = 1;           // poisson gaps: the same seed gives the same schedule
  transport::CurveKeys curve;  // CurveZMQ keys towards the gateways; empty: plain text
};

// Everything a run recorded.
struct RunResult {
  std::vector<RequestRecord> records;  // in send order
  std::vector<LoadStep> steps;         // the steps that ran
  std::vector<int64_t> step_start_us;  // per step, from the run's start
  int64_t end_us = 0;
};

class Runner {
 public:
  // Connects and sends one probe request (not recorded); throws std::runtime_error when the
  // gateway does not answer it within the timeout or answers it with an error.
  explicit Runner(RunOptions options);
  // Runs one step; returns false when the run must stop (out of record capacity, or a stop
  // signal), after draining.
  bool run_step(const LoadStep& step);
  // Waits for the replies still due (up to the request timeout plus a grace period); requests
  // still unanswered are recorded kNoReply.
  void drain();
  const RunResult& result() const { return result_; }
  RunResult take_result();

 private:
  void send_one(int16_t step);
  // Takes the replies that arrive within `wait` (at least one poll); returns how many.
  int collect(std::chrono::microseconds wait);
  // Gives up (kNoReply) on requests sent longer than the timeout plus a grace period ago, so a
  // lost reply does not hold a closed-loop user forever.
  void expire(int64_t now_us);
  int64_t now_us() const;
  void print_progress(bool final_line);

  RunOptions options_;
  client::Client client_;
  protocol::Request request_;  // reused for every send: only id and text change
  RunResult result_;
  Clock::time_point start_;
  uint64_t in_flight_ = 0;
  size_t oldest_pending_ = 0;  // no pending request before this index (records are in send order)
  uint64_t next_input_ = 0;
  uint64_t answered_ = 0, failed_ = 0;
  double current_users_ = 0;  // closed loop: the users of the last step, where a spawn ramp starts
  Clock::time_point next_progress_, progress_at_;
  uint64_t progress_answered_ = 0;
};

// perf_analyzer's concurrency sweep: closed-loop levels from `from` doubling up to `to` (the
// last level is `to` itself), each measured apart (`level` gives its stop condition), until the
// throughput grows by less than `min_gain` (0.05: 5%) over the previous level, or, with an SLO,
// a level's p99 is over it (more users only queue longer).
struct ConcurrencySweep {
  int from = 1, to = 1;
  double min_gain = 0.05;
  std::optional<double> slo_p99_ms;
  LoadStep level;  // duration / requests per level; users and label are set per level
};
void run_concurrency_sweep(Runner& runner, const ConcurrencySweep& sweep);

}  // namespace seqpipe::bench
