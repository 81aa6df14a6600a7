#pragma once
// The batcher's logic, socket-free and clock-free (time is passed in with every call): the hub
// between the tokenizers and the engine stages. What it owns: per model version (a Lane: each
// worker serves one version, named in its `ready`; each item names its version in its header),
// the DynamicBatcher (sequences waiting for an encoder batch), the queues of encoded sequences
// waiting for decoder slots and of decoded ones waiting for a postprocessor, and one
// hub::WorkerPool per worker stage (credits, liveness, what each worker holds, retry-once); and
// the cancelled requests. docs/ARCHITECTURE.md tells how a sequence goes through it.
//
// Contracts and invariants:
//  - Work goes to a worker only within its credit: a batch costs an encoder 1, a sequence costs
//    a decoder slot_cost(num_beams) (its KV-cache slots), a sequence costs a postprocessor 1.
//  - A batch holds sequences of one model version, and goes to an encoder serving it; so does
//    every item to a decoder or postprocessor. Work for a version no replica serves waits (and
//    expires) without holding up the other versions.
//  - Admission is by deadline: a sequence that could not be answered before its deadline behind
//    the sequences queued ahead of it (the lane's ServiceEstimate) is answered `overloaded` at
//    once, so the queue holds what the pipeline can serve in time and no more. Everything
//    waiting here for one model version (sequences waiting for a batch plus encoded ones waiting
//    for decoder slots) is also at most batcher.max_queue_size (a memory bound). No new batch of
//    a version is formed while 2 x max_batch_size of its encoded sequences wait for slots.
//  - Both queues serve priority level 1 first, in arrival order within a level; a sequence
//    waiting for slots is never overtaken by its own level.
//  - An item past its deadline is dropped, never sent (its gateway has answered it); so is a
//    queued sequence that can no longer be answered in time (its deadline comes before now +
//    the measured service time), answered `deadline_exceeded` at once. While a version's workers
//    are idle, nothing is refused or dropped on an estimate (it may be stale: only serving
//    measures it again).
//  - A cancelled request (remembered until its deadline) has no more work sent anywhere; the
//    decoders running its sequences get a `cancel` and give their slots back.
//  - Failed items (overloaded, unavailable, invalid priority, no ids) are answered straight to
//    their gateway as failed results.
//  - An item that arrives a second time while its deadline runs (a gateway submitted it again
//    when this batcher restarted, and a tokenizer had queued the first copy for it) is dropped.
//  - Heartbeats to gateways carry this batcher's incarnation (a number drawn at start): a
//    gateway that sees a new one knows the batcher restarted and submits what it held again.
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "batcher/dynamic_batcher.h"
#include "seqpipe/config/batcher_config.h"
#include "seqpipe/config/liveness_config.h"
#include "seqpipe/messages/clock.h"
#include "seqpipe/messages/stage_messages.h"
#include "seqpipe/observability/metrics.h"
#include "seqpipe/observability/status.h"
#include "seqpipe/runtime/credit_queue.h"
#include "seqpipe/runtime/hub.h"
#include "seqpipe/runtime/outbox.h"

namespace seqpipe::batcher {

// The worker stages, in the order of their sockets: Outbox::Send::link == the role's value.
enum class Role { kEncoder, kDecoder, kPostprocessor };
inline size_t link(Role role) {
  return static_cast<size_t>(role);
}

BatchPolicy batch_policy(const config::BatcherConfig& config);

class BatcherHub {
 public:
  // The config's batcher and liveness sections: all of it that the batcher's hub reads.
  BatcherHub(const config::BatcherConfig& batcher, const config::LivenessConfig& liveness,
             metrics::StageMetrics& metrics);

  // `sequence` messages from the tokenizers (a full queue answers `overloaded` to the gateway),
  // `cancel` messages from the gateways, and gateways' heartbeats (`from`: where to answer;
  // tick() heartbeats back).
  void on_sequences(stage::StageMessage&& message, const Now& now, Outbox& out);
  // Messages from engine workers: ready (which names the model version the worker serves),
  // credit, heartbeat, encoded, decoded.
  void on_worker(Role role, const std::string& worker, stage::StageMessage&& message,
                 const Now& now);
  // Heartbeats to every worker (and the gateways that heartbeat) when due; workers silent too
  // long are dead.
  void tick(const Now& now, Outbox& out);
  // Sends whatever the credits allow: batches to encoders, sequences to decoders and
  // postprocessors.
  void dispatch(const Now& now, Outbox& out);
  // A worker is dead or unreachable (a send to it failed): it leaves; the work it held (what
  // could not be delivered included) is dispatched again, once, or answered `unavailable`.
  void worker_dead(Role role, const std::string& worker, const Now& now, Outbox& out);

  // How long the loop may sleep before dispatch() could do something new without input.
  std::chrono::microseconds next_wakeup() const { return wakeup_; }
  size_t queued() const;
  // The batcher and its workers, for `seqpipe status`: the workers per model version.
  std::vector<status::StageStatus> status() const;
  // The credits of a stage's workers serving `model` (no such version: none).
  const common::CreditQueue& credits(Role role, const std::string& model = "") const;

 private:
  template <class Item>
  struct Waiting {
    Clock::time_point since;
    Item item;
  };
  // What the batcher keeps for one model version.
  struct Lane {
    Lane(const config::BatcherConfig& batcher, const config::LivenessConfig& liveness,
         metrics::StageMetrics& hub_metrics, const std::string& model);
    // A repository's version counts what happens to its items under its own labels (queue
    // time, batch sizes, queue depth, deadlines, workers); a pipeline's one model, on the hub's.
    std::optional<metrics::StageMetrics> labelled;
    metrics::StageMetrics& metrics;
    DynamicBatcher batcher;
    hub::WorkerPool<stage::Encode> encoders;
    hub::WorkerPool<stage::Decode> decoders;
    hub::WorkerPool<stage::Postprocess> postprocessors;
    std::deque<Waiting<stage::EncodedItem>> decode_queue;
    std::deque<Waiting<stage::DecodedItem>> postprocess_queue;
    // What waits for each worker stage (by Role): depth and oldest wait, for autoscalers.
    std::array<metrics::StageQueueMetrics, 3> queue_metrics;
    ServiceEstimate estimate;
    // Whether any of its sequences is being encoded or decoded, or waits for decoder slots.
    bool serving() const;
  };
  // The lane of `model`, made on first use.
  Lane& lane(const std::string& model);
  // The lane of a worker that announced itself in `role`; null for one that did not.
  Lane* lane_of(Role role, const std::string& worker);
  // What a worker in `role` does with ready / credit / heartbeat, and the rest of its message.
  void on_encoder(Lane& lane, const std::string& worker, stage::Encoded& encoded, const Now& now);
  void on_decoder(Lane& lane, const std::string& worker, stage::Decoded& decoded, const Now& now);

  void enqueue(stage::SequenceItem&& item, const Now& now, Outbox& out);
  void cancel(const stage::Cancel& message, Outbox& out);
  bool is_cancelled(const stage::WorkHeader& item) const;
  // The item's priority level (params.priority, or the default level when it gives none).
  int level(const stage::WorkHeader& item) const;
  // Drops the items of cancelled requests from `items`, counting them.
  template <class Item>
  void drop_cancelled(std::vector<Item>& items);
  void fail(const stage::WorkHeader& item, protocol::Error error, Outbox& out);
  // Answers `unavailable` the items a dead worker held that cannot go out again.
  template <class Item>
  void fail_lost(const std::vector<std::pair<Item, std::string>>& failed, Outbox& out);
  void dispatch_batches(Lane& lane, const Now& now, Outbox& out);
  // The per-stage queue gauges of `lane` (depth, oldest wait).
  void set_queue_metrics(Lane& lane, const Now& now);
  // Encoded (decode_queue) or decoded (postprocess_queue) sequences to workers with credit,
  // in order; one message per worker.
  template <class Work, class Item>
  void dispatch_queue(Lane& lane, hub::WorkerPool<Work>& pool, std::deque<Waiting<Item>>& queue,
                      const Now& now, Outbox& out);

  // What a new lane is made of.
  const config::BatcherConfig batcher_config_;
  const config::LivenessConfig liveness_;
  metrics::StageMetrics& metrics_;
  std::map<std::string, Lane> lanes_;  // by model version
  // Per role, the model version each worker announced.
  std::unordered_map<std::string, std::string> lane_of_[3];
  // Requests cancelled by their gateway (key: gateway, request), until their deadline.
  std::unordered_map<std::string, Deadline> cancelled_;
  // Gateways that sent heartbeats (several batchers per gateway), by results endpoint: when last
  // heard.
  std::unordered_map<std::string, Clock::time_point> gateways_;
  Clock::time_point next_gateway_heartbeat_{};
  std::unordered_map<uint64_t, Waiting<stage::SequenceItem>>
      batch_items_;  // by DynamicBatcher sequence id
  uint64_t next_sequence_ = 1;
  std::vector<QueuedSequence> batch_, expired_;  // scratch for DynamicBatcher::poll
  std::chrono::microseconds wakeup_{100000};
  size_t max_queue_size_;
  int default_priority_;          // the level of items without params.priority
  std::string ingress_endpoint_;  // names this batcher in its heartbeats to gateways
  uint64_t incarnation_;          // drawn at start, never 0
  // Items taken in, by hub::item_key, until their deadline: a second copy is dropped. And when
  // each went to an encoder, for the service time measured when it comes back decoded.
  struct Taken {
    Deadline deadline;
    std::optional<Clock::time_point> dispatched, decoding;  // to an encoder, to a decoder
  };
  std::unordered_map<std::string, Taken> taken_;
  // Answers for ServiceEstimate: the decoded items' service times, and the lane's estimate.
  void measure(Lane& lane, const std::vector<stage::DecodedItem>& items, const Now& now);
  // Answers `expired` (taken from the batch queue): those still before their deadline are
  // answered deadline_exceeded now (the others were answered by their gateway).
  void drop_expired(Lane& lane, const Now& now, Outbox& out);
  // Drops the encoded sequences waiting for decoder slots that could no longer be decoded in
  // time (deadline before now + the measured decode time), answering them deadline_exceeded.
  void drop_late_encoded(Lane& lane, const Now& now, Outbox& out);
  // Notes when the items of the decoder messages in out.sends[first..] went to their decoder.
  void note_decoding(size_t first, const Now& now, const Outbox& out);
  std::chrono::milliseconds heartbeat_interval_;
  // Encoded sequences waiting for decoder slots before batching pauses.
  size_t decode_backlog_limit_;
};

}  // namespace seqpipe::batcher
