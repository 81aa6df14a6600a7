#include "batcher/batcher_hub.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "seqpipe/common/service.h"

namespace seqpipe::batcher {

namespace {
constexpr std::chrono::microseconds kIdleWakeup{100000};
constexpr const char* kRoleNames[] = {"encoder", "decoder", "postprocessor"};

uint64_t micros(Clock::duration d) {
  return static_cast<uint64_t>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
}
int cost(Role role, const stage::WorkItem& item) {
  return role == Role::kDecoder ? std::max(1, item.params.num_beams) : 1;
}
}  // namespace

BatchPolicy batch_policy(const config::BatcherConfig& c) {
  BatchPolicy p;
  p.max_batch_size = c.max_batch_size;
  p.preferred_batch_sizes = c.preferred_batch_sizes;
  p.max_queue_delay = std::chrono::microseconds(c.max_queue_delay_us);
  p.max_batch_tokens = c.max_batch_tokens;
  p.max_queue_size = c.max_queue_size;
  p.priority_levels = c.priority_levels;
  return p;
}

namespace {
common::HubLiveness hub_liveness(const config::LivenessConfig& c) {
  return {std::chrono::milliseconds(c.heartbeat_interval_ms), c.heartbeat_liveness};
}
std::string item_key(const stage::WorkItem& item) {
  return item.gateway + '\n' + std::to_string(item.request) + '\n' + std::to_string(item.index);
}
std::string request_key(const stage::WorkItem& item) {
  return item.gateway + '\n' + std::to_string(item.request);
}
bool same_request(const stage::WorkItem& a, const stage::WorkItem& b) {
  return a.request == b.request && a.gateway == b.gateway;
}
bool expired(const stage::WorkItem& item, int64_t now_unix_us) {
  return item.deadline_unix_us != 0 && now_unix_us >= item.deadline_unix_us;
}
}  // namespace

BatcherHub::BatcherHub(const config::PipelineConfig& config, metrics::StageMetrics& metrics)
    : metrics_(metrics),
      batcher_(batch_policy(config.batcher)),
      liveness_{hub_liveness(config.liveness), hub_liveness(config.liveness),
                hub_liveness(config.liveness)},
      max_queue_size_(static_cast<size_t>(config.batcher.max_queue_size)),
      default_priority_(config.batcher.default_priority_level),
      ingress_endpoint_(config.batcher.ingress_endpoint),
      heartbeat_interval_(config.liveness.heartbeat_interval_ms),
      decode_backlog_limit_(2 * static_cast<size_t>(config.batcher.max_batch_size)) {
  batch_.reserve(static_cast<size_t>(config.batcher.max_batch_size));
}

void BatcherHub::on_sequences(stage::StageMessage&& message, Clock::time_point now, Outbox& out) {
  if (message.kind == stage::MessageKind::kCancel) {
    cancel(message, out);
    return;
  }
  if (message.kind == stage::MessageKind::kHeartbeat) {
    for (const auto& item : message.items) {
      if (!item.gateway.empty()) gateways_[item.gateway] = now;
    }
    return;
  }
  if (message.kind != stage::MessageKind::kSequence) {
    spdlog::warn("batcher: ignored a '{}' message on the ingress socket",
                 stage::kind_name(message.kind));
    metrics_.malformed();
    return;
  }
  metrics_.request(static_cast<double>(message.items.size()));
  for (auto& item : message.items) enqueue(std::move(item), now, out);
}

void BatcherHub::fail(stage::WorkItem&& item, protocol::Error error, Outbox& out) {
  metrics_.error(error.code);
  spdlog::warn("batcher: request {} item {}: {}: {}", item.request, item.index,
               protocol::wire_name(error.code), error.message);
  item.ids.clear();
  item.hidden.clear();
  item.rows = 0;
  item.error = std::move(error);
  std::string gateway = item.gateway;
  out.to_gateways.emplace_back(
      std::move(gateway), stage::StageMessage{stage::MessageKind::kResult, 0, {std::move(item)}});
}

bool BatcherHub::is_cancelled(const stage::WorkItem& item) const {
  return !cancelled_.empty() && cancelled_.count(request_key(item)) != 0;
}

void BatcherHub::drop_cancelled(std::vector<stage::WorkItem>& items) {
  if (cancelled_.empty()) return;
  const size_t before = items.size();
  std::erase_if(items, [&](const stage::WorkItem& item) { return is_cancelled(item); });
  if (items.size() != before) metrics_.cancelled(static_cast<double>(before - items.size()));
}

void BatcherHub::cancel(const stage::StageMessage& message, Outbox& out) {
  for (const auto& request : message.items) {
    if (!cancelled_.emplace(request_key(request), request.deadline_unix_us).second)
      continue;  // a repeat
    size_t dropped = 0;
    // Waiting for a batch.
    for (auto it = batch_items_.begin(); it != batch_items_.end();) {
      if (same_request(it->second.item, request)) {
        batcher_.remove(it->first);
        it = batch_items_.erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
    // Waiting for a decoder or a postprocessor.
    auto waiting = [&](const Waiting& w) { return same_request(w.item, request); };
    dropped += std::erase_if(decode_queue_, waiting) + std::erase_if(postprocess_queue_, waiting);
    // Running on a decoder: it stops them and returns their slots as credits. They leave the
    // in-flight record now, so a late answer is dropped and a dead decoder's work is not re-sent.
    for (auto& [worker, held] : in_flight_[static_cast<size_t>(Role::kDecoder)]) {
      stage::StageMessage to_decoder{stage::MessageKind::kCancel, 0, {}};
      for (auto& m : held) {
        for (auto i = m.items.begin(); i != m.items.end();) {
          if (same_request(*i, request)) {
            stage::WorkItem key;  // what the decoder needs to find it
            key.request = i->request;
            key.index = i->index;
            key.gateway = i->gateway;
            key.deadline_unix_us = i->deadline_unix_us;
            to_decoder.items.push_back(std::move(key));
            i = m.items.erase(i);
          } else {
            ++i;
          }
        }
      }
      std::erase_if(held, [](const stage::StageMessage& m) { return m.items.empty(); });
      if (!to_decoder.items.empty()) {
        dropped += to_decoder.items.size();
        out.to_workers.push_back({Role::kDecoder, worker, std::move(to_decoder)});
      }
    }
    if (dropped > 0) metrics_.cancelled(static_cast<double>(dropped));
    spdlog::info(
        "batcher: request {} of {} cancelled; {} item(s) dropped here or stopped on a decoder",
        request.request, request.gateway, dropped);
  }
}

void BatcherHub::enqueue(stage::WorkItem&& item, Clock::time_point now, Outbox& out) {
  if (is_cancelled(item)) {  // cancelled while it was being tokenized
    metrics_.cancelled();
    return;
  }
  const int64_t left_us = item.deadline_unix_us == 0
                              ? int64_t{3600} * 1000000
                              : item.deadline_unix_us - service::unix_now_us();
  if (item.ids.empty()) {
    fail(std::move(item),
         {protocol::ErrorCode::kInternal, "batcher received a sequence without ids"}, out);
    return;
  }
  const int priority = level(item);
  if (priority >
      batcher_.policy().priority_levels) {  // the gateway checks it; its config may differ
    fail(std::move(item),
         {protocol::ErrorCode::kInvalidArgument,
          "params.priority " + std::to_string(priority) +
              " is not a priority level of the batcher (1.." +
              std::to_string(batcher_.policy().priority_levels) + ")"},
         out);
    return;
  }
  const uint64_t id = next_sequence_++;
  const QueuedSequence queued{id, static_cast<int>(item.ids.size()), now,
                              now + std::chrono::microseconds(left_us), priority};
  // max_queue_size bounds everything waiting here, encoded sequences waiting for decoder slots
  // included: under overload the excess is refused at once instead of expiring in a queue.
  if (batcher_.size() + decode_queue_.size() >= max_queue_size_ || !batcher_.enqueue(queued)) {
    fail(std::move(item),
         {protocol::ErrorCode::kOverloaded, "the batcher's queue is full; retry later"}, out);
    return;
  }
  batch_items_.emplace(id, Waiting{now, std::move(item)});
}

void BatcherHub::on_worker(Role role, const std::string& worker, stage::StageMessage&& message,
                           Clock::time_point now) {
  const auto r = static_cast<size_t>(role);
  auto& credits = workers_[r];
  using stage::MessageKind;
  const bool expected = message.kind == MessageKind::kReady ||
                        message.kind == MessageKind::kCredit ||
                        message.kind == MessageKind::kHeartbeat ||
                        (role == Role::kEncoder && message.kind == MessageKind::kEncoded) ||
                        (role == Role::kDecoder && message.kind == MessageKind::kDecoded);
  if (!expected) {
    spdlog::warn("batcher: ignored a '{}' message from a {}", stage::kind_name(message.kind),
                 kRoleNames[r]);
    metrics_.malformed();
    return;
  }
  const bool known = credits.free_credits(worker) >= 0;
  if (message.kind == MessageKind::kReady) {
    credits.announce(worker, message.credits);
    liveness_[r].seen(worker, now);
    spdlog::info("batcher: {} joined with {} credits ({} now)", kRoleNames[r], message.credits,
                 credits.size());
    return;
  }
  if (!known) {
    // A worker declared dead that is still talking (it was stopped, not killed): its work went
    // to another replica. It will miss our heartbeats, reconnect and announce itself anew.
    if (!message.items.empty()) {
      spdlog::info("batcher: dropped {} late item(s) from a {} declared dead", message.items.size(),
                   kRoleNames[r]);
      metrics_.late(static_cast<double>(message.items.size()));
    }
    return;
  }
  liveness_[r].seen(worker, now);
  if (message.kind == MessageKind::kHeartbeat) return;
  credits.release(worker, message.credits);
  settle(role, worker, message);
  drop_cancelled(message.items);  // cancelled while an encoder or decoder had them
  if (role != Role::kEncoder) {   // decoded: on to the postprocessors
    for (auto& item : message.items) postprocess_queue_.push_back({now, std::move(item)});
    return;
  }
  // Encoded sequences wait for decoder slots by priority level too: each goes behind the last
  // of its level or a higher one (arrival order within a level, so a waiting beam search is not
  // overtaken by its own level).
  for (auto& item : message.items) {
    const int priority = level(item);
    auto at = std::find_if(decode_queue_.rbegin(), decode_queue_.rend(),
                           [&](const Waiting& w) { return level(w.item) <= priority; });
    decode_queue_.insert(at.base(), {now, std::move(item)});
  }
}

int BatcherHub::level(const stage::WorkItem& item) const {
  return item.params.priority == 0 ? default_priority_ : item.params.priority;
}

void BatcherHub::record(Role role, const std::string& worker, const stage::StageMessage& message) {
  in_flight_[static_cast<size_t>(role)][worker].push_back(message);
}

void BatcherHub::settle(Role role, const std::string& worker, stage::StageMessage& message) {
  auto& held = in_flight_[static_cast<size_t>(role)][worker];
  if (role != Role::kDecoder) {
    // One encoded (encoder) or credit (postprocessor) message answers the oldest message sent.
    if (!held.empty() &&
        (message.kind != stage::MessageKind::kCredit || role == Role::kPostprocessor))
      held.pop_front();
    return;
  }
  // Decoders: each finished item leaves the record; one not in it is a duplicate (its first
  // decoder was declared dead and it went to another) and goes no further.
  auto& items = message.items;
  size_t kept = 0;
  for (size_t n = 0; n < items.size(); ++n) {
    const stage::WorkItem& item = items[n];
    bool found = false;
    for (auto m = held.begin(); m != held.end() && !found; ++m) {
      for (auto i = m->items.begin(); i != m->items.end(); ++i) {
        if (i->request == item.request && i->index == item.index && i->gateway == item.gateway) {
          m->items.erase(i);
          if (m->items.empty()) held.erase(m);
          found = true;
          break;
        }
      }
    }
    if (found) {
      if (kept != n) items[kept] = std::move(items[n]);
      ++kept;
    } else {
      metrics_.late();
    }
  }
  items.resize(kept);
}

void BatcherHub::tick(Clock::time_point now, Outbox& out) {
  if (!gateways_.empty() && now >= next_gateway_heartbeat_) {
    // Answer the gateways that heartbeat us; forget one silent for 10 of its periods (gone).
    next_gateway_heartbeat_ = now + heartbeat_interval_;
    std::erase_if(gateways_,
                  [&](const auto& g) { return now - g.second > 10 * heartbeat_interval_; });
    stage::WorkItem me;
    me.batcher = ingress_endpoint_;
    for (const auto& [gateway, seen] : gateways_) {
      out.to_gateways.emplace_back(gateway,
                                   stage::StageMessage{stage::MessageKind::kHeartbeat, 0, {me}});
    }
  }
  for (size_t r = 0; r < 3; ++r) {
    const auto role = static_cast<Role>(r);
    if (liveness_[r].heartbeat_due(now)) {
      metrics_.heartbeats_missed(liveness_[r].silent(now));
      for (const auto& worker : liveness_[r].workers()) {
        out.to_workers.push_back({role, worker, {stage::MessageKind::kHeartbeat, 0, {}}});
      }
      if (role == Role::kDecoder) {
        // Once per interval: forget what can no longer matter (the gateway has answered it).
        const int64_t now_unix = service::unix_now_us();
        for (auto& [worker, held] : in_flight_[r]) {
          for (auto& m : held) {
            std::erase_if(m.items,
                          [&](const stage::WorkItem& item) { return expired(item, now_unix); });
          }
          std::erase_if(held, [](const stage::StageMessage& m) { return m.items.empty(); });
        }
        std::erase_if(retried_,
                      [&](const auto& kv) { return kv.second != 0 && now_unix >= kv.second; });
        std::erase_if(cancelled_, [&](const auto& kv) { return now_unix >= kv.second; });
      }
    }
    for (const auto& worker : liveness_[r].take_dead(now)) worker_dead(role, worker, now, out);
  }
}

void BatcherHub::dispatch(Clock::time_point now, Outbox& out) {
  wakeup_ = kIdleWakeup;
  // Downstream first: sequences taken by decoders make room for new batches (backpressure).
  dispatch_queue(Role::kDecoder, decode_queue_, now, out);
  dispatch_queue(Role::kPostprocessor, postprocess_queue_, now, out);
  dispatch_batches(now, out);
  metrics_.set_queue_depth(static_cast<double>(queued()));
}

void BatcherHub::dispatch_batches(Clock::time_point now, Outbox& out) {
  auto& encoders = workers_[static_cast<size_t>(Role::kEncoder)];
  // Deciding takes sequences out of the queue, so decide only when an encoder can take a batch;
  // until then the queue keeps growing toward a fuller batch.
  // Backpressure: no new batches while the decoders are behind (encoded sequences waiting for
  // slots), so encoder time is not spent on work that would only wait.
  while (batcher_.size() > 0 && encoders.largest_free() >= 1 &&
         decode_queue_.size() < decode_backlog_limit_) {
    const BatchDecision& decision = batcher_.poll(now, batch_, expired_);
    for (const auto& e : expired_) {
      batch_items_.erase(e.id);  // the gateway answers deadline_exceeded
      metrics_.error(protocol::ErrorCode::kDeadlineExceeded);
    }
    if (decision.action != BatchDecision::Action::kSend) {
      if (decision.action == BatchDecision::Action::kWait)
        wakeup_ = std::min(wakeup_, decision.wait);
      break;
    }
    stage::StageMessage encode{stage::MessageKind::kEncode, 0, {}};
    encode.items.reserve(batch_.size());
    for (const auto& b : batch_) {
      auto it = batch_items_.find(b.id);
      Waiting& w = it->second;
      const uint64_t waited = micros(now - w.since);
      w.item.timings.batch_wait_us += waited;
      metrics_.queue_time(static_cast<double>(waited) * 1e-6);
      encode.items.push_back(std::move(w.item));
      batch_items_.erase(it);
    }
    metrics_.batch_size(static_cast<double>(encode.items.size()));
    std::string worker = *encoders.take(1);
    record(Role::kEncoder, worker, encode);
    out.to_workers.push_back({Role::kEncoder, std::move(worker), std::move(encode)});
  }
}

void BatcherHub::dispatch_queue(Role role, std::deque<Waiting>& queue, Clock::time_point now,
                                Outbox& out) {
  auto& workers = workers_[static_cast<size_t>(role)];
  const stage::MessageKind kind =
      role == Role::kDecoder ? stage::MessageKind::kDecode : stage::MessageKind::kPostprocess;
  const size_t first =
      out.to_workers.size();  // this role's messages: one per worker, items appended
  const int64_t now_unix = service::unix_now_us();
  while (!queue.empty()) {
    Waiting& w = queue.front();
    if (w.item.deadline_unix_us != 0 && now_unix >= w.item.deadline_unix_us) {
      metrics_.error(protocol::ErrorCode::kDeadlineExceeded);
      queue.pop_front();
      continue;
    }
    auto worker = workers.take(cost(role, w.item));
    if (!worker) break;  // in order: a beam search waiting for slots is not overtaken
    w.item.timings.queue_us += micros(now - w.since);
    auto it = std::find_if(out.to_workers.begin() + static_cast<std::ptrdiff_t>(first),
                           out.to_workers.end(),
                           [&](const Outbox::ToWorker& m) { return m.worker == *worker; });
    if (it == out.to_workers.end()) {
      out.to_workers.push_back({role, std::move(*worker), {kind, 0, {}}});
      it = out.to_workers.end() - 1;
    }
    it->message.items.push_back(std::move(w.item));
    queue.pop_front();
  }
  for (size_t i = first; i < out.to_workers.size(); ++i)
    record(role, out.to_workers[i].worker, out.to_workers[i].message);
}

std::vector<status::StageStatus> BatcherHub::status() const {
  std::vector<status::StageStatus> stages{{"batcher", 1, 0, static_cast<int>(batcher_.size()), 0}};
  const size_t queued[] = {0, decode_queue_.size(), postprocess_queue_.size()};
  for (size_t r = 0; r < 3; ++r) {
    const auto& w = workers_[r];
    stages.push_back({kRoleNames[r], static_cast<int>(w.size()),
                      w.total_capacity() - w.total_free(), static_cast<int>(queued[r]),
                      w.total_free()});
  }
  return stages;
}

void BatcherHub::worker_dead(Role role, const std::string& worker, Clock::time_point now,
                             Outbox& out) {
  const auto r = static_cast<size_t>(role);
  if (!workers_[r].remove(worker)) return;
  liveness_[r].forget(worker);
  metrics_.worker_dead();
  auto node = in_flight_[r].extract(worker);
  size_t held = 0;
  if (!node.empty()) {
    for (const auto& m : node.mapped()) held += m.items.size();
  }
  spdlog::warn(
      "batcher: {} replica declared dead ({} left); {} item(s) it held are re-dispatched or "
      "answered",
      kRoleNames[r], workers_[r].size(), held);
  if (node.empty()) return;
  const int64_t now_unix = service::unix_now_us();
  std::vector<stage::WorkItem> again;  // in the order they were first sent
  for (auto& m : node.mapped()) {
    for (auto& item : m.items) {
      if (expired(item, now_unix) || is_cancelled(item))
        continue;  // answered by its gateway already
      const std::string key = item_key(item);
      if (retried_.count(key) != 0 || workers_[r].size() == 0) {
        fail(std::move(item),
             {protocol::ErrorCode::kUnavailable,
              retried_.count(key) != 0
                  ? std::string("two ") + kRoleNames[r] + " replicas failed on this item"
                  : std::string("the ") + kRoleNames[r] +
                        " holding this item died and no other is live"},
             out);
        continue;
      }
      retried_.emplace(key, item.deadline_unix_us);
      metrics_.redispatched();
      again.push_back(std::move(item));
    }
  }
  if (role == Role::kEncoder) {
    for (auto& item : again) enqueue(std::move(item), now, out);  // batched anew
  } else {
    auto& queue = role == Role::kDecoder ? decode_queue_ : postprocess_queue_;
    for (auto it = again.rbegin(); it != again.rend(); ++it)
      queue.push_front({now, std::move(*it)});  // first in line
  }
}

}  // namespace seqpipe::batcher
