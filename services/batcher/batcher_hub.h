#pragma once
// The batcher's logic, socket-free: the hub between the tokenizers and the engine stages.
// Sequences from the tokenizers queue in the DynamicBatcher; whole batches go to encoders with
// credit (one credit = one batch in flight); encoded sequences go to decoders as their free
// KV-cache slots allow (a sequence costs num_beams credits); decoded sequences go to
// postprocessors with credit. Every dispatch is by common::CreditQueue, so a slow replica runs
// out of credit and the others take the work. The batcher is its workers' hub: heartbeats both
// ways (Paranoid Pirate); the work a dead worker held goes once to another replica of its stage,
// and a second loss, or no replica left, answers `unavailable` to the item's gateway. Time is
// passed in with every call (a Now: steady and wall clock) and never read here; the wall clock
// reads the items' deadlines. A `cancel` from a gateway drops its requests' work
// wherever the batcher holds it (queues, encoders' answers still to come, sequences arriving
// later from a tokenizer) and is forwarded to each decoder running one of them, which stops the
// sequence and returns its slots.
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "batcher/dynamic_batcher.h"
#include "seqpipe/common/config.h"
#include "seqpipe/common/credit_queue.h"
#include "seqpipe/common/liveness.h"
#include "seqpipe/common/metrics.h"
#include "seqpipe/common/stage_messages.h"
#include "seqpipe/common/status.h"

namespace seqpipe::batcher {

enum class Role { kEncoder, kDecoder, kPostprocessor };

struct Outbox {
  struct ToWorker {
    Role role;
    std::string worker;  // routing id
    stage::StageMessage message;
  };
  std::vector<ToWorker> to_workers;
  std::vector<std::pair<std::string, stage::StageMessage>>
      to_gateways;  // (results endpoint, message)
  void clear() {
    to_workers.clear();
    to_gateways.clear();
  }
};

BatchPolicy batch_policy(const config::BatcherConfig& config);

class BatcherHub {
 public:
  BatcherHub(const config::PipelineConfig& config, metrics::StageMetrics& metrics);

  // `sequence` messages from the tokenizers (a full queue answers `overloaded` to the gateway),
  // `cancel` messages from the gateways, and gateways' heartbeats (`from`: where to answer;
  // tick() heartbeats back).
  void on_sequences(stage::StageMessage&& message, const Now& now, Outbox& out);
  // Messages from engine workers: ready, credit, heartbeat, encoded, decoded.
  void on_worker(Role role, const std::string& worker, stage::StageMessage&& message,
                 const Now& now);
  // Heartbeats to every worker when due (into `out`); workers silent too long are dead.
  void tick(const Now& now, Outbox& out);
  // Sends whatever the credits allow: batches to encoders, sequences to decoders and
  // postprocessors.
  void dispatch(const Now& now, Outbox& out);
  // A worker is dead or unreachable (a send to it failed): it leaves; the work it held (what
  // could not be delivered included) is dispatched again, once, or answered `unavailable`.
  void worker_dead(Role role, const std::string& worker, const Now& now, Outbox& out);

  // How long the loop may sleep before dispatch() could do something new without input.
  std::chrono::microseconds next_wakeup() const { return wakeup_; }
  size_t queued() const {
    return batcher_.size() + decode_queue_.size() + postprocess_queue_.size();
  }
  // The batcher and its workers, for `seqpipe status`.
  std::vector<status::StageStatus> status() const;
  const common::CreditQueue& credits(Role role) const {
    return workers_[static_cast<size_t>(role)];
  }

 private:
  template <class Item>
  struct Waiting {
    Clock::time_point since;
    Item item;
  };
  // What each worker holds, kept to re-dispatch if it dies: the messages sent and not yet
  // answered. Encoders and postprocessors answer in order (one encoded / credit message per
  // message sent); decoders finish in any order, so their items are matched by (request, index).
  template <class M>
  using InFlight = std::unordered_map<std::string, std::deque<M>>;

  void enqueue(stage::SequenceItem&& item, const Now& now, Outbox& out);
  void cancel(const stage::Cancel& message, Outbox& out);
  bool is_cancelled(const stage::WorkHeader& item) const;
  // The item's priority level (params.priority, or the default level when it gives none).
  int level(const stage::WorkHeader& item) const;
  // Drops the items of cancelled requests from `items`, counting them.
  template <class Item>
  void drop_cancelled(std::vector<Item>& items);
  void fail(const stage::WorkHeader& item, protocol::Error error, Outbox& out);
  // Removes the decoded items of `worker` from its in-flight record. Items not in it (sent to a
  // replica later declared dead, or duplicates) are removed from `items`: they go no further.
  void settle_decoded(const std::string& worker, std::vector<stage::DecodedItem>& items);
  void dispatch_batches(const Now& now, Outbox& out);
  template <class M, class Item>
  void dispatch_queue(Role role, std::deque<Waiting<Item>>& queue, InFlight<M>& in_flight,
                      Outbox& out, const Now& now);
  // The items `worker` held that go out again (once), in the order they were first sent; the
  // others are answered `unavailable` (lost twice, or no replica left) or dropped (expired,
  // cancelled).
  template <class M>
  auto take_lost(Role role, InFlight<M>& in_flight, const std::string& worker, const Now& now,
                 Outbox& out);

  metrics::StageMetrics& metrics_;
  DynamicBatcher batcher_;
  common::CreditQueue workers_[3];
  common::HubLiveness liveness_[3];
  InFlight<stage::Encode> encoding_;
  InFlight<stage::Decode> decoding_;
  InFlight<stage::Postprocess> postprocessing_;
  // Items re-dispatched once already (key: gateway, request, index), with their deadline.
  std::unordered_map<std::string, Deadline> retried_;
  // Requests cancelled by their gateway (key: gateway, request), until their deadline.
  std::unordered_map<std::string, Deadline> cancelled_;
  // Gateways that sent heartbeats (several batchers per gateway), by results endpoint: when last
  // heard.
  std::unordered_map<std::string, Clock::time_point> gateways_;
  Clock::time_point next_gateway_heartbeat_{};
  std::unordered_map<uint64_t, Waiting<stage::SequenceItem>>
      batch_items_;  // by DynamicBatcher sequence id
  uint64_t next_sequence_ = 1;
  std::deque<Waiting<stage::EncodedItem>> decode_queue_;
  std::deque<Waiting<stage::DecodedItem>> postprocess_queue_;
  std::vector<QueuedSequence> batch_, expired_;  // scratch for DynamicBatcher::poll
  std::chrono::microseconds wakeup_{100000};
  size_t max_queue_size_;
  int default_priority_;          // the level of items without params.priority
  std::string ingress_endpoint_;  // names this batcher in its heartbeats to gateways
  std::chrono::milliseconds heartbeat_interval_;
  size_t
      decode_backlog_limit_;  // encoded sequences waiting for decoder slots before batching pauses
};

}  // namespace seqpipe::batcher
