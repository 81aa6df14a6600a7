#pragma once
// The hub side of the worker protocol, written once for both hubs: the gateway keeps one
// WorkerPool for its tokenizers, the batcher one each for its encoders, decoders and
// postprocessors. A pool holds, for the workers of one stage on one ROUTER socket:
//  - their credits (common::CreditQueue: a worker gets work only within the credit it announced);
//  - their liveness (common::HubLiveness: heartbeats both ways, Paranoid Pirate);
//  - what each holds: the work messages sent and not answered yet, kept to send again if it dies;
//  - the retry-once rule: the items a dead worker held go out once more; an item lost a second
//    time, or with no replica left, is answered `unavailable`.
// Socket-free and clock-free (time is passed in); the hub decides what its work is, where lost
// items go back and how a failed item is answered. The loop helpers below are the socket side
// both hub mains share: reading a worker socket (with the status probe) and sending an Outbox.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "seqpipe/config/liveness_config.h"
#include "seqpipe/messages/clock.h"
#include "seqpipe/messages/stage_messages.h"
#include "seqpipe/observability/metrics.h"
#include "seqpipe/observability/status.h"
#include "seqpipe/runtime/credit_queue.h"
#include "seqpipe/runtime/liveness.h"
#include "seqpipe/runtime/outbox.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::hub {

// How a stage's workers answer the work messages they get.
enum class Answers {
  kInOrder,  // one answer per message, oldest first (tokenizers, encoders, postprocessors)
  kByItem,   // item by item, in any order (decoders: continuous batching)
};

// Which pool: for logs, metrics' context and the heartbeats it sends.
struct PoolInfo {
  std::string hub;    // "gateway", "batcher"
  std::string stage;  // "tokenizer", "encoder"...
  size_t link = 0;    // Outbox::Send::link of its socket
  Answers answers = Answers::kInOrder;
};

// Identity of an item across the pipeline: (owning gateway, request, index).
std::string item_key(const stage::WorkHeader& item);

// A random number that tells this run of a hub from its predecessors on the same endpoints
// (never 0): a batcher's incarnation, where a gateway's request ids start.
uint64_t draw_incarnation();

// `Work` is the work message the pool's workers take (stage::Tokenize, Encode, Decode,
// Postprocess): a struct with `items`.
template <class Work>
class WorkerPool {
 public:
  using Item = typename decltype(Work::items)::value_type;

  WorkerPool(PoolInfo info, const config::LivenessConfig& liveness, metrics::StageMetrics& metrics)
      : info_(std::move(info)),
        liveness_(std::chrono::milliseconds(liveness.heartbeat_interval_ms),
                  liveness.heartbeat_liveness),
        metrics_(metrics) {}

  // --- What the workers say ---
  // A worker announced `credits` (on connect, or reconnecting with a new routing id). A member
  // announcing none is draining (it stops on SIGTERM): it gets no more work, and what it holds
  // comes back as answers, so it leaves with nothing to re-dispatch.
  void ready(const std::string& worker, int credits, SteadyClock::time_point now) {
    if (credits == 0 && credits_.free_credits(worker) >= 0) {
      credits_.announce(worker, 0);
      liveness_.seen(worker, now);
      if (draining_.insert(worker).second) metrics_.drained();
      spdlog::info("{}: a {} replica is draining (its credit withdrawn)", info_.hub, info_.stage);
      return;
    }
    credits_.announce(worker, credits);
    liveness_.seen(worker, now);
    spdlog::info("{}: {} joined with {} credits ({} now)", info_.hub, info_.stage, credits,
                 credits_.size());
  }
  // Any other message from `worker`: true when it is a member (the message counts, and shows it
  // alive); false for one declared dead, which is still talking (stopped, not killed): its work
  // went to another replica, so what it says goes no further. It will miss the heartbeats,
  // reconnect and announce itself anew.
  bool heard(const std::string& worker, SteadyClock::time_point now) {
    if (credits_.free_credits(worker) < 0) return false;
    liveness_.seen(worker, now);
    return true;
  }
  // Credits a worker gave back.
  void release(const std::string& worker, int credits) { credits_.release(worker, credits); }
  // Answers::kInOrder: the oldest message sent to `worker` is answered.
  void answered(const std::string& worker) {
    auto it = held_.find(worker);
    if (it != held_.end() && !it->second.empty()) it->second.pop_front();
  }
  // Answers::kByItem: `item` is answered. False when `worker` does not hold it (a duplicate, or
  // an item sent again after `worker` was declared dead): it goes no further.
  bool answered(const std::string& worker, const stage::WorkHeader& item) {
    auto it = held_.find(worker);
    if (it == held_.end()) return false;
    auto& messages = it->second;
    for (auto m = messages.begin(); m != messages.end(); ++m) {
      for (auto i = m->items.begin(); i != m->items.end(); ++i) {
        if (i->request == item.request && i->index == item.index && i->gateway == item.gateway) {
          m->items.erase(i);
          if (m->items.empty()) messages.erase(m);
          return true;
        }
      }
    }
    return false;
  }

  // --- Dispatch ---
  // The worker to send work costing `cost` credits to (CreditQueue::take), its credit taken.
  std::optional<std::string> take(int cost = 1) { return credits_.take(cost); }
  // `work` went to `worker`: held until answered, or sent again if the worker dies.
  void sent(const std::string& worker, const Work& work) { held_[worker].push_back(work); }
  // Answers::kByItem: drops the held items `drop(item)` picks (a cancel: the worker stops them
  // and gives their credits back; a late answer goes no further). Calls `dropped(worker, n)` for
  // each worker that held any.
  template <class Drop, class Dropped>
  void drop_held(Drop drop, Dropped dropped) {
    for (auto& [worker, messages] : held_) {
      size_t n = 0;
      for (auto& m : messages) n += std::erase_if(m.items, drop);
      std::erase_if(messages, [](const Work& m) { return m.items.empty(); });
      if (n > 0) dropped(worker, n);
    }
  }

  // --- Liveness ---
  // Heartbeats to every worker when one is due (into `out`, once per interval) and forgets what
  // can no longer matter (prune()). Returns the workers silent for `liveness` intervals: dead,
  // for the hub to remove(). `beat` says whether this call was a heartbeat.
  std::vector<std::string> tick(const Now& now, Outbox& out, bool* beat = nullptr) {
    const bool due = liveness_.heartbeat_due(now.steady);
    if (beat) *beat = due;
    if (due) {
      metrics_.heartbeats_missed(liveness_.silent(now.steady));
      for (const auto& worker : liveness_.workers())
        out.sends.push_back({info_.link, worker, stage::Heartbeat{}});
      prune(now);
    }
    return liveness_.take_dead(now.steady);
  }

  // A worker is dead or unreachable (silent, or a send to it failed): it leaves. The items it
  // held come back, split by the retry-once rule; `skip(item)` picks those that no longer matter
  // (answered, expired, cancelled), which are dropped. Nothing when `worker` was not a member.
  struct Lost {
    std::vector<Item> again;  // in the order first sent: send each once more
    // Lost a second time, or no replica left: answer `unavailable` with this message.
    std::vector<std::pair<Item, std::string>> failed;
  };
  template <class Skip>
  Lost remove(const std::string& worker, const Now& now, Skip skip) {
    Lost lost;
    if (!credits_.remove(worker)) return lost;
    liveness_.forget(worker);
    auto node = held_.extract(worker);
    size_t held = 0;
    if (!node.empty()) {
      for (const auto& m : node.mapped()) held += m.items.size();
    }
    if (draining_.erase(worker) > 0 && held == 0) {  // drained and gone: not a failure
      spdlog::info("{}: a drained {} replica left ({} left)", info_.hub, info_.stage,
                   credits_.size());
      return lost;
    }
    metrics_.worker_dead();
    ++lost_;
    spdlog::warn(
        "{}: a {} replica is dead ({} left); {} item(s) it held are sent again or answered",
        info_.hub, info_.stage, credits_.size(), held);
    if (node.empty()) return lost;
    for (auto& m : node.mapped()) {
      for (auto& item : m.items) {
        if (item.deadline.expired(now) || skip(item)) continue;  // answered by its gateway
        std::string key = item_key(item);
        const bool twice = retried_.count(key) != 0;
        if (twice || credits_.size() == 0) {
          lost.failed.emplace_back(
              std::move(item),
              twice ? "two " + info_.stage + " replicas failed on this item"
                    : "the " + info_.stage + " holding this item died and no other is live");
          continue;
        }
        retried_.emplace(std::move(key), item.deadline);
        lost.again.push_back(std::move(item));
      }
    }
    metrics_.redispatched(static_cast<double>(lost.again.size()));
    return lost;
  }

  // --- For the hub's status and dispatch ---
  const common::CreditQueue& credits() const { return credits_; }
  size_t size() const { return credits_.size(); }
  int largest_free() const { return credits_.largest_free(); }
  // This stage's line in `seqpipe status`, with the work waiting in the hub for its credit.
  status::StageStatus status(int queued) const {
    const int free = credits_.total_free();
    return {.stage = info_.stage,
            .replicas = static_cast<int>(credits_.size()),
            .in_flight = credits_.total_capacity() - free,
            .queued = queued,
            .free_credits = free,
            .lost = lost_};
  }
  const PoolInfo& info() const { return info_; }

 private:
  // Once per heartbeat interval: held items past their deadline leave the record (kByItem; an
  // in-order record keeps one entry per message sent), and so do the retry marks of items past
  // their deadline.
  void prune(const Now& now) {
    if (info_.answers == Answers::kByItem) {
      drop_held([&](const Item& item) { return item.deadline.expired(now); },
                [](const std::string&, size_t) {});
    }
    std::erase_if(retried_, [&](const auto& kv) { return kv.second.expired(now); });
  }

  PoolInfo info_;
  int lost_ = 0;  // replicas removed as dead, for the status
  common::CreditQueue credits_;
  common::HubLiveness liveness_;
  metrics::StageMetrics& metrics_;
  std::unordered_map<std::string, std::deque<Work>> held_;  // by worker
  std::unordered_map<std::string, Deadline> retried_;       // by item_key: sent again once
  std::unordered_set<std::string> draining_;                // members that withdrew their credit
};

// One WorkerPool per model version for the workers of one stage on one socket: each worker serves
// one version ("name/version", the key its `ready` carries) and joins that version's pool, so
// work for a version goes only to its replicas. A hub dispatches each version's work from that
// version's pool; the pools' liveness, credits and retry-once are each pool's own.
template <class Work>
class ModelPools {
 public:
  ModelPools(PoolInfo info, const config::LivenessConfig& liveness, metrics::StageMetrics& metrics)
      : info_(std::move(info)), liveness_(liveness), metrics_(metrics) {}

  // The pool of `model`, made empty on first use.
  WorkerPool<Work>& pool(const std::string& model) {
    return pools_.try_emplace(model, info_, liveness_, metrics_).first->second;
  }
  // `worker` announced `credits` serving `model`: it is a member of that pool (only).
  WorkerPool<Work>& ready(const std::string& worker, const std::string& model, int credits,
                          SteadyClock::time_point now) {
    auto [it, added] = model_of_.try_emplace(worker, model);
    if (!added && it->second != model) {  // not expected: a routing id is one replica's
      pools_.at(it->second).remove(worker, Now{}, [](const Item&) { return true; });
      it->second = model;
    }
    WorkerPool<Work>& p = pool(model);
    p.ready(worker, credits, now);
    return p;
  }
  // The pool of a worker that announced itself; null for one that did not (or left).
  WorkerPool<Work>* of(const std::string& worker) {
    auto it = model_of_.find(worker);
    return it == model_of_.end() ? nullptr : &pools_.at(it->second);
  }
  // The model a worker serves; empty for one that did not announce itself.
  std::string model_of(const std::string& worker) const {
    auto it = model_of_.find(worker);
    return it == model_of_.end() ? std::string() : it->second;
  }
  WorkerPool<Work>* find(const std::string& model) {
    auto it = pools_.find(model);
    return it == pools_.end() ? nullptr : &it->second;
  }
  // A worker left (its pool's remove() done): it is forgotten.
  void forget(const std::string& worker) { model_of_.erase(worker); }
  // Every pool's tick; the dead workers of all of them.
  std::vector<std::string> tick(const Now& now, Outbox& out, bool* beat = nullptr) {
    std::vector<std::string> dead;
    bool any = false;
    for (auto& [model, p] : pools_) {
      bool b = false;
      for (auto& worker : p.tick(now, out, &b)) dead.push_back(std::move(worker));
      any = any || b;
    }
    if (beat) *beat = any;
    return dead;
  }
  std::map<std::string, WorkerPool<Work>>& pools() { return pools_; }
  const std::map<std::string, WorkerPool<Work>>& pools() const { return pools_; }
  // Replicas of every version.
  size_t size() const {
    size_t n = 0;
    for (const auto& [model, p] : pools_) n += p.size();
    return n;
  }
  // This stage's lines in `seqpipe status`: one per version (named "<stage> <model>" for a
  // repository's versions), `queued(model)` the work waiting for it; one empty line without any.
  template <class Queued>
  std::vector<status::StageStatus> status(Queued queued) const {
    std::vector<status::StageStatus> lines;
    for (const auto& [model, p] : pools_) {
      lines.push_back(p.status(queued(model)));
      if (!model.empty()) lines.back().stage += " " + model;
    }
    if (lines.empty()) lines.push_back(WorkerPool<Work>(info_, liveness_, metrics_).status(0));
    return lines;
  }

 private:
  using Item = typename WorkerPool<Work>::Item;
  PoolInfo info_;
  config::LivenessConfig liveness_;
  metrics::StageMetrics& metrics_;
  std::map<std::string, WorkerPool<Work>> pools_;          // by model version
  std::unordered_map<std::string, std::string> model_of_;  // worker -> model version
};

// --- The socket side of the hub loop (hub::run_hub, seqpipe/runtime/hub_loop.h) ---

// Reads every message waiting on a hub's worker socket (ROUTER: routing id + payload). The
// status probe is answered with `status()`; other messages are decoded (worker::decode_frames:
// malformed ones are logged, counted and dropped) and handed to `on_message(worker, message)`.
// A model catalog message (model_control::kCatalogCommand) is answered with `catalog(bytes)` when
// that gives an answer (the gateway's), else dropped.
void read_workers(transport::Socket& socket, std::string_view from, const stage::Limits& limits,
                  metrics::StageMetrics& metrics,
                  const std::function<std::vector<status::StageStatus>()>& status,
                  const std::function<void(const std::string&, stage::StageMessage&&)>& on_message,
                  const std::function<std::optional<std::string>(std::string_view)>& catalog = {});

// Sends an Outbox's sends (over `sockets[link]`) and pushes, in rounds: `dispatch(out)` runs
// first in each round, and a send that fails (ROUTER_MANDATORY: the worker left) calls
// `unreachable(link, worker)`, which declares it dead and puts its work (the failed message
// included) back, so the next round sends it elsewhere. What a last round leaves waits for the
// next loop. Replies to clients are the caller's.
void send_rounds(Outbox& out, const std::vector<transport::Socket*>& sockets,
                 transport::PushSockets& pushes, std::string_view hub,
                 const std::function<void(Outbox&)>& dispatch,
                 const std::function<void(size_t, const std::string&, Outbox&)>& unreachable);

}  // namespace seqpipe::hub
