#pragma once
// The gateway's logic, socket-free: client requests in, tokenize work out to tokenizers with
// credit, results in, exactly one reply per request out. It owns every request's deadline and
// answers deadline_exceeded itself; a result for a request already answered is dropped and
// counted. It is the tokenizers' hub: heartbeats both ways, and the work a dead tokenizer held
// goes once to another (a second loss, or no tokenizer left, answers `unavailable`). Time is
// passed in with every call (a Now: the steady and the wall clock read together) and never read
// here, so tests drive it with made-up moments. A client may cancel its own request by id
// (op "cancel"): the request is answered `cancelled` at once, and a `cancel` message goes to the
// batcher, which drops the request's work and has its decoder free the KV-cache slots. With
// several batchers (gateway.batcher_endpoints) it picks one per request (round-robin over the live
// ones), exchanges heartbeats with them, and submits a silent batcher's requests once to another
// (else `unavailable`).
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gateway/response_cache.h"
#include "seqpipe/common/config.h"
#include "seqpipe/common/credit_queue.h"
#include "seqpipe/common/liveness.h"
#include "seqpipe/common/metrics.h"
#include "seqpipe/common/protocol.h"
#include "seqpipe/common/stage_messages.h"
#include "seqpipe/common/status.h"

namespace seqpipe::gateway {

using SteadyClock = std::chrono::steady_clock;
using Envelope = std::vector<std::string>;  // the client's routing frames, sent back with its reply

struct Outbox {
  std::vector<std::pair<Envelope, std::string>> replies;  // (envelope, reply bytes)
  std::vector<std::pair<std::string, stage::StageMessage>>
      to_tokenizers;  // (worker routing id, message)
  // (batcher ingress endpoint, message): cancels, and heartbeats when there are several batchers
  std::vector<std::pair<std::string, stage::StageMessage>> to_batcher;
  void clear() {
    replies.clear();
    to_tokenizers.clear();
    to_batcher.clear();
  }
};

// The protocol limits this gateway enforces, from the config (docs/PROTOCOL.md, "Limits").
protocol::Limits protocol_limits(const config::PipelineConfig& config);

class Gateway {
 public:
  // `results_endpoint` is where this gateway's results come back (its bound PULL endpoint).
  Gateway(const config::PipelineConfig& config, std::string results_endpoint,
          metrics::StageMetrics& stage_metrics, metrics::GatewayMetrics& gateway_metrics);

  // A client message: `frames` as the ROUTER received them (routing frames, then the payload).
  void on_client(std::vector<std::string>&& frames, const Now& now, Outbox& out);
  // ready / credit / heartbeat from a tokenizer.
  void on_tokenizer(const std::string& worker, const stage::StageMessage& message, const Now& now);
  // Results (or failed items) from the postprocessors and other stages.
  void on_results(stage::StageMessage&& message, const Now& now, Outbox& out);
  // Answers deadline_exceeded for every request past its deadline.
  void expire(const Now& now, Outbox& out);
  // Sends waiting tokenize work to tokenizers with credit.
  void dispatch(const Now& now, Outbox& out);
  // Heartbeats to the tokenizers (and batchers) when due; tokenizers silent too long are dead
  // (tokenizer_dead), batchers too (batcher_dead).
  void tick(const Now& now, Outbox& out);
  // Batcher `index` (in batcher_endpoints order) fell silent: its requests go once to another
  // live batcher, else they are answered `unavailable`. It is live again when heard from.
  void batcher_dead(size_t index, const Now& now, Outbox& out);
  size_t live_batchers() const;
  // A tokenizer is dead or unreachable (a send to it failed): it leaves, and the work it held
  // waits again for another tokenizer, once; else its requests are answered `unavailable`.
  void tokenizer_dead(const std::string& worker, const Now& now, Outbox& out);

  std::optional<SteadyClock::time_point> next_deadline() const;
  size_t in_flight() const { return requests_.size(); }
  // The gateway and its tokenizers, for `seqpipe status`.
  std::vector<status::StageStatus> status() const;
  size_t waiting() const { return waiting_.size(); }

 private:
  struct Request {
    Envelope envelope;
    std::string client_id;
    bool batch_form = false;
    bool return_scores = false;
    std::vector<std::string> texts;
    std::vector<float> scores;
    std::vector<bool> done;
    size_t remaining = 0;
    SteadyClock::time_point received;
    SteadyClock::time_point expires;  // on this gateway's clock: answered deadline_exceeded then
    Deadline deadline;                // the same instant, as every item of it carries it
    stage::StageTimings timings;      // per stage, the slowest of the request's texts
    bool retried = false;             // its tokenize work was re-dispatched once already
    std::vector<std::string> cache_keys;  // per text, when the cache is on
    std::string cancel_key;               // key in by_client_ (empty: the request had no id)
    // With several batchers: which one holds it, and what a re-submission needs.
    size_t batcher = 0;
    bool resubmitted = false;
    std::vector<std::string> sources;  // the texts
    protocol::GenerateParams params;
  };
  struct BatcherLink {
    std::string endpoint;  // its ingress
    SteadyClock::time_point last_seen;
    bool live = true;
  };
  // The tokenize message for the request's texts not answered yet, to its current batcher.
  stage::Tokenize tokenize_work(uint64_t id, const Request& r) const;
  // The next live batcher after `after` (round-robin), or nullopt.
  std::optional<size_t> next_live_batcher(size_t after) const;
  // A cancel from the client behind `envelope` for its request(s) with id `client_id`.
  void cancel(const Envelope& envelope, const std::string& client_id, const Now& now, Outbox& out);
  // Which requests a cancel may name: the client's routing frames and its id.
  static std::string client_key(const Envelope& envelope, const std::string& client_id);
  void reply(uint64_t id, protocol::Reply&& reply, SteadyClock::time_point now, Outbox& out);
  static protocol::Reply ok_reply(Request& r);
  void reply_error(Envelope envelope, std::string client_id, protocol::Error error,
                   SteadyClock::time_point received, SteadyClock::time_point now, Outbox& out);

  config::PipelineConfig config_;
  protocol::Limits limits_;
  std::string results_endpoint_;
  metrics::StageMetrics& metrics_;
  metrics::GatewayMetrics& gateway_metrics_;
  common::CreditQueue tokenizers_;
  common::HubLiveness liveness_;
  ResponseCache cache_;
  // Tokenize messages sent to each tokenizer and not yet credited back (a tokenizer answers in
  // order, one credit per message), kept to re-dispatch if it dies.
  std::unordered_map<std::string, std::deque<stage::Tokenize>> in_flight_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Request> requests_;
  std::set<std::pair<SteadyClock::time_point, uint64_t>> deadlines_;
  std::deque<stage::Tokenize> waiting_;  // tokenize messages without a tokenizer credit yet
  // Requests in flight by client_key, for cancels (a client may reuse an id: a cancel names all).
  std::unordered_multimap<std::string, uint64_t> by_client_;
  // The batchers (one, unless gateway.batcher_endpoints lists several: only then heartbeats,
  // round-robin and re-submission).
  std::vector<BatcherLink> batchers_;
  size_t last_batcher_ = 0;
  SteadyClock::time_point next_batcher_heartbeat_{};
};

}  // namespace seqpipe::gateway
