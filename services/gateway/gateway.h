#pragma once
// The gateway's logic, socket-free and clock-free (time is passed in with every call). What it
// owns: every client request from decoding to its one reply (docs/ARCHITECTURE.md tells the whole
// story), the response cache, the cancel index, the model catalog (a request's model resolves to
// a model version, or `not_found`) and the tokenizers' hub (a hub::WorkerPool per model version).
// Failover between several batchers is BatcherFailover's.
//
// Contracts and invariants:
//  - Exactly one reply per accepted request: ok when every text is in, or the first error, or
//    deadline_exceeded at its deadline, or cancelled; anything arriving after it (a late result,
//    a second cancel, the deadline) changes nothing and late results are counted.
//  - A request's deadline is fixed on receipt (timeout_ms or gateway.default_timeout_ms) and every
//    item of it carries it (a Deadline, wall clock); the gateway answers deadline_exceeded itself.
//  - Tokenize work leaves only with a tokenizer credit, one message per request (its texts not
//    answered from the cache); the queue waiting for credit holds at most batcher.max_queue_size
//    messages (beyond: `overloaded` at once).
//  - The work a dead tokenizer held goes once more to another; a second loss, or no tokenizer
//    left, answers the request `unavailable`.
//  - The work a dead or restarted batcher held is submitted again, once (BatcherFailover).
//  - A model version has at most batcher.max_queue_size sequences in flight (waiting here
//    included), and while the pipeline is busy a request that could not be answered before its
//    deadline at the measured pace (with an allowance for its spread) is not let in: both are
//    refused `overloaded` at once (InFlightLimit), not after a trip to the batcher.
//  - While the batcher refuses a model version's requests (`overloaded`), the gateway refuses a
//    share of them itself, at once, before tokenizing (AdmissionThrottle).
//  - A cancel names the client's own request (routing frames + id): the request is answered
//    `cancelled` and every batcher gets a `cancel` for it (a re-submitted request may have work at
//    two).
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "gateway/admission_throttle.h"
#include "gateway/batcher_failover.h"
#include "gateway/in_flight_limit.h"
#include "gateway/model_settings.h"
#include "gateway/response_cache.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/messages/clock.h"
#include "seqpipe/messages/stage_messages.h"
#include "seqpipe/observability/metrics.h"
#include "seqpipe/observability/status.h"
#include "seqpipe/protocol/protocol.h"
#include "seqpipe/runtime/hub.h"
#include "seqpipe/runtime/model_control.h"
#include "seqpipe/runtime/outbox.h"
#include "text/text_pieces.h"

namespace seqpipe::gateway {

using Envelope = std::vector<std::string>;  // the client's routing frames, sent back with its reply

// Where a front door's request is answered: each reply, typed (partials, then the final one or
// an error), on the gateway's thread. A door hands it over to its own thread when it must.
using ReplySink = std::function<void(protocol::Reply&&)>;

// A front door's request, as its door's validator made it (json_request.h: the option table's
// ranges and the model version's limits, as decode_request's for the msgpack door), or why it was
// refused: a refused one is answered and counted by the gateway too, as the msgpack door's is.
// Its id is the door's own tag (unique per door): a cancel names it.
struct Submission {
  std::variant<protocol::Request, protocol::RejectedRequest> request;
  ReplySink sink;
};

// The gateway's one worker socket: Outbox::Send::link of the messages to tokenizers.
inline constexpr size_t kTokenizerLink = 0;

class Gateway {
 public:
  // `results_endpoint` is where this gateway's results come back (its bound PULL endpoint).
  // `version_config`: the config each model version of a repository is served with, whose
  // per-model settings the versions served at start get (ModelSettingsTable; empty: this
  // gateway's own config). Called here only: set_models' catalogs carry their settings.
  Gateway(const config::PipelineConfig& config, std::string results_endpoint,
          metrics::StageMetrics& stage_metrics, metrics::GatewayMetrics& gateway_metrics,
          ModelSettingsTable::VersionConfig version_config = {});

  // A client message: `frames` as the ROUTER received them (routing frames, then the payload).
  // Replies go to out.replies.
  void on_client(std::vector<std::string>&& frames, const Now& now, Outbox& out);
  // A front door's request (or a cancel of its request), typed: the one in-process way in, as
  // Triton's doors call TRITONSERVER_ServerInferAsync. Admission, limits of the version,
  // deadlines, the response cache, cancellation and metrics are on_client's; the replies go to
  // the sink, typed, never through out.replies.
  void submit(Submission&& submission, const Now& now, Outbox& out);
  // ready / credit / heartbeat from a tokenizer.
  void on_tokenizer(const std::string& worker, const stage::StageMessage& message, const Now& now);
  // Results (or failed items) from the postprocessors and other stages; batchers' heartbeats.
  void on_results(stage::StageMessage&& message, const Now& now, Outbox& out);
  // Answers deadline_exceeded for every request past its deadline.
  void expire(const Now& now, Outbox& out);
  // Sends waiting tokenize work to tokenizers with credit.
  void dispatch(const Now& now, Outbox& out);
  // Heartbeats to the tokenizers (and batchers) when due; tokenizers silent too long are dead
  // (tokenizer_dead), and so are batchers (their requests go to another, once).
  void tick(const Now& now, Outbox& out);
  // A tokenizer is dead or unreachable (a send to it failed): it leaves, and the work it held
  // waits again for another tokenizer, once; else its requests are answered `unavailable`.
  void tokenizer_dead(const std::string& worker, const Now& now, Outbox& out);

  std::optional<SteadyClock::time_point> next_deadline() const;
  size_t in_flight() const { return requests_.size(); }
  size_t live_batchers() const { return batchers_.live(); }
  // The gateway and its tokenizers, for `seqpipe status`.
  std::vector<status::StageStatus> status() const;
  size_t waiting() const;
  const config::ModelCatalog& models() const { return models_; }
  // What the front doors' validators check a request under, per model version (SharedCatalog).
  RequestLimits request_limits() const { return settings_.request_limits(); }
  // With a repository: the model versions to route to from now on, with their settings (the
  // supervisor's catalog; a request in flight keeps its version). Reads no file. Answers the
  // requests in flight per model version.
  model_control::InFlight set_models(const std::vector<model_control::CatalogEntry>& catalog);

 private:
  // A client text: the items it goes out as, one or its pieces (gateway.split_words).
  struct ClientText {
    size_t first_item = 0, items = 1;
    std::string whole;                // when split: the text, whose bytes between pieces stay
    std::vector<text::Piece> pieces;  // empty: not split
  };
  // Items are the client's texts, or their pieces: texts, scores, usage, sequences, done,
  // cache_keys and sources are per item, and the reply joins a text's pieces back (ok_reply).
  // Who a request's replies go to: a ROUTER client by its routing frames, or a door's sink.
  struct Caller {
    Envelope envelope;
    ReplySink sink;  // set: a front door's request
  };
  struct Request {
    Caller caller;
    std::string client_id;
    bool batch_form = false;
    bool return_scores = false;
    std::vector<ClientText> client_texts;
    std::vector<std::string> texts;
    std::vector<float> scores;
    std::vector<protocol::Usage> usage;
    // params.num_return_sequences > 1: each text's beam hypotheses, as they come back.
    std::optional<std::vector<std::vector<protocol::Sequence>>> sequences;
    std::vector<bool> done;
    size_t remaining = 0;
    SteadyClock::time_point received;
    SteadyClock::time_point expires;  // on this gateway's clock: answered deadline_exceeded then
    Deadline deadline;                // the same instant, as every item of it carries it
    stage::StageTimings timings;      // per stage, the slowest of the request's texts
    std::vector<std::string> cache_keys;  // per text, when the cache is on
    std::string cancel_key;               // key in by_client_ (empty: the request had no id)
    // What a re-submission needs (its batcher died or restarted): the texts and parameters.
    std::vector<std::string> sources;
    protocol::GenerateParams params;
    std::string model;  // the model version that runs it (config::model_key)
    // Streamed: the pipeline sends partials (texts holds an item's latest until its final one).
    bool stream = false;
    std::string streamed;  // a streamed request's text sent so far in partial replies
  };
  // A client's generate request decoded under the limits of the model version that runs it, with
  // that version's key and settings; nullopt when answered already (an error; a cancel done;
  // a retry of one in flight, which answers it).
  struct Admitted {
    protocol::Request request;
    std::string model;                // config::model_key of the version
    const ModelSettings* settings{};  // in settings_: valid until the catalog changes
  };
  // `decoded` under the loosest limits; `own_decode` decodes again under a version's limits (the
  // msgpack door's bytes; a door's request was checked under its version's by its validator).
  using OwnDecode = std::function<std::variant<protocol::Request, protocol::RejectedRequest>(
      const protocol::Limits&)>;
  std::optional<Admitted> admit(Caller& caller,
                                std::variant<protocol::Request, protocol::RejectedRequest>& decoded,
                                const OwnDecode& own_decode, const Now& now, Outbox& out);
  // An admitted request into the pipeline (or answered at once: refused, or from the cache).
  void start(Caller&& caller, Admitted&& admitted, const Now& now, Outbox& out);
  // A reply to `caller`: its sink, or out.replies for its ROUTER client (`last`: the envelope is
  // not needed again).
  static void send(Caller& caller, protocol::Reply&& reply, bool last, Outbox& out);
  // Answers the lost requests of a batcher that died or restarted and submits the moved ones
  // again, first in line, in arrival order.
  void submit_again(const BatcherFailover::Failover& failover, const Now& now, Outbox& out);
  // The tokenize message for the request's texts not answered yet, to its current batcher.
  stage::Tokenize tokenize_work(uint64_t id, const Request& r) const;
  // A new request's items: its texts, split into pieces of at most `split_words` words (0: not).
  static void add_texts(Request& r, std::vector<std::string>&& texts, size_t split_words);
  // Marks done the items the response cache answers (r.params set).
  void answer_from_cache(Request& r);
  // A cancel from the client behind `envelope` for its request(s) with id `client_id`.
  void cancel(const Envelope& envelope, const std::string& client_id, const Now& now, Outbox& out);
  // Which requests a cancel may name: the client's routing frames and its id.
  static std::string client_key(const Envelope& envelope, const std::string& client_id);
  // Whether `request` is a msgpack client's request sent again while its id is in flight.
  bool retries_one_in_flight(const Caller& caller, const protocol::Request& request) const;
  // Whether the new request `r` (its items) may go into `model`'s pipeline (InFlightLimit);
  // false when answered `overloaded`, at once.
  bool admit_in_flight(Request& r, const std::string& model, uint32_t timeout_ms, const Now& now,
                       Outbox& out);
  void reply(uint64_t id, protocol::Reply&& reply, SteadyClock::time_point now, Outbox& out);
  // Answers request `id` `unavailable` (when still in flight).
  void unavailable(uint64_t id, const std::string& why, SteadyClock::time_point now, Outbox& out);
  static protocol::Reply ok_reply(Request& r);
  // A streamed request's text so far: a partial reply with what `text` adds to the text sent
  // already (nothing when it adds nothing or does not extend it: a stale or reordered partial).
  static void stream_partial(Request& r, std::string_view text, Outbox& out);
  // A streamed request's text as far as it is final: its pieces done, then the partial text of
  // the first piece not done (text::joined_so_far), or the one text's partial text.
  static std::string streamed_so_far(const Request& r);
  void reply_error(Caller caller, std::string client_id, protocol::Error error,
                   SteadyClock::time_point received, SteadyClock::time_point now, Outbox& out);

  // What the loop reads of the config after construction.
  size_t max_queue_size_;        // batcher.max_queue_size
  uint32_t default_timeout_ms_;  // gateway.default_timeout_ms
  bool serves_repository_;       // model.repository is set: catalogs change the models
  std::string default_model_;    // model.name: a request's model when it names none
  std::string results_endpoint_;
  metrics::StageMetrics& metrics_;
  metrics::GatewayMetrics& gateway_metrics_;
  config::ModelCatalog models_;                  // what a request's model and version resolve to
  ModelSettingsTable settings_;                  // per model version in models_
  hub::ModelPools<stage::Tokenize> tokenizers_;  // per model version
  BatcherFailover batchers_;
  ResponseCache cache_;
  AdmissionThrottle throttle_;  // refuses here what the batcher would refuse
  InFlightLimit in_flight_;     // per model version: sequences in flight, the pipeline's pace
  // Request ids start at a random point: batchers remember the ids they took until their
  // deadlines, and a restarted gateway (on the same results endpoint) must not repeat them.
  uint64_t next_id_;
  std::unordered_map<uint64_t, Request> requests_;
  std::set<std::pair<SteadyClock::time_point, uint64_t>> deadlines_;
  // Tokenize messages waiting for a tokenizer credit of their model version.
  std::map<std::string, std::deque<stage::Tokenize>> waiting_;
  // For the status: requests, those answered with an error, and of those the client's.
  int64_t requests_received_ = 0;
  int64_t errors_answered_ = 0;
  int64_t client_errors_answered_ = 0;
  // Requests in flight by client_key, for cancels and retries (a door's requests have no envelope
  // and their clients may repeat an id: a cancel names all).
  std::unordered_multimap<std::string, uint64_t> by_client_;
};

}  // namespace seqpipe::gateway
