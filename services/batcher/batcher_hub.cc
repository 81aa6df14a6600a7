#include "batcher/batcher_hub.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace seqpipe::batcher {

namespace {
constexpr std::chrono::microseconds kIdleWakeup{100000};
constexpr const char* kRoleNames[] = {"encoder", "decoder", "postprocessor"};

uint64_t micros(Clock::duration d) {
  return static_cast<uint64_t>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
}
// Credits an item costs a worker: its KV-cache slots on a decoder, else 1.
int cost(Role role, const stage::WorkHeader& item) {
  return role == Role::kDecoder ? engine::slot_cost(item.params.num_beams) : 1;
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
std::string item_key(const stage::WorkHeader& item) {
  return item.gateway + '\n' + std::to_string(item.request) + '\n' + std::to_string(item.index);
}
std::string request_key(const std::string& gateway, uint64_t request) {
  return gateway + '\n' + std::to_string(request);
}
bool same_request(const stage::WorkHeader& a, const stage::RequestRef& b) {
  return a.request == b.request && a.gateway == b.gateway;
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

void BatcherHub::on_sequences(stage::StageMessage&& message, const Now& now, Outbox& out) {
  if (const auto* cancel_message = std::get_if<stage::Cancel>(&message)) {
    cancel(*cancel_message, out);
    return;
  }
  if (const auto* heartbeat = std::get_if<stage::Heartbeat>(&message)) {
    if (!heartbeat->from.empty()) gateways_[heartbeat->from] = now.steady;
    return;
  }
  auto* sequences = std::get_if<stage::Sequence>(&message);
  if (!sequences) {
    spdlog::warn("batcher: ignored a '{}' message on the ingress socket",
                 stage::kind_name(message));
    metrics_.malformed();
    return;
  }
  metrics_.request(static_cast<double>(sequences->items.size()));
  for (auto& item : sequences->items) enqueue(std::move(item), now, out);
}

void BatcherHub::fail(const stage::WorkHeader& item, protocol::Error error, Outbox& out) {
  metrics_.error(error.code);
  spdlog::warn("batcher: request {} item {}: {}: {}", item.request, item.index,
               protocol::wire_name(error.code), error.message);
  out.to_gateways.emplace_back(item.gateway,
                               stage::Result{{stage::failed(item, std::move(error))}});
}

bool BatcherHub::is_cancelled(const stage::WorkHeader& item) const {
  return !cancelled_.empty() && cancelled_.count(request_key(item.gateway, item.request)) != 0;
}

template <class Item>
void BatcherHub::drop_cancelled(std::vector<Item>& items) {
  if (cancelled_.empty()) return;
  const size_t before = items.size();
  std::erase_if(items, [&](const Item& item) { return is_cancelled(item); });
  if (items.size() != before) metrics_.cancelled(static_cast<double>(before - items.size()));
}

void BatcherHub::cancel(const stage::Cancel& message, Outbox& out) {
  for (const auto& request : message.requests) {
    if (!cancelled_.emplace(request_key(request.gateway, request.request), request.deadline).second)
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
    auto waiting = [&](const auto& w) { return same_request(w.item, request); };
    dropped += std::erase_if(decode_queue_, waiting) + std::erase_if(postprocess_queue_, waiting);
    // Running on a decoder: it stops them and returns their slots as credits. They leave the
    // in-flight record now, so a late answer is dropped and a dead decoder's work is not re-sent.
    for (auto& [worker, held] : decoding_) {
      size_t stopped = 0;
      for (auto& m : held) {
        stopped += std::erase_if(
            m.items, [&](const stage::EncodedItem& i) { return same_request(i, request); });
      }
      std::erase_if(held, [](const stage::Decode& m) { return m.items.empty(); });
      if (stopped > 0) {
        dropped += stopped;
        out.to_workers.push_back({Role::kDecoder, worker, stage::Cancel{{request}}});
      }
    }
    if (dropped > 0) metrics_.cancelled(static_cast<double>(dropped));
    spdlog::info(
        "batcher: request {} of {} cancelled; {} item(s) dropped here or stopped on a decoder",
        request.request, request.gateway, dropped);
  }
}

void BatcherHub::enqueue(stage::SequenceItem&& item, const Now& now, Outbox& out) {
  if (is_cancelled(item)) {  // cancelled while it was being tokenized
    metrics_.cancelled();
    return;
  }
  if (item.ids.empty()) {
    fail(item, {protocol::ErrorCode::kInternal, "batcher received a sequence without ids"}, out);
    return;
  }
  const int priority = level(item);
  if (priority >
      batcher_.policy().priority_levels) {  // the gateway checks it; its config may differ
    fail(item,
         {protocol::ErrorCode::kInvalidArgument,
          "params.priority " + std::to_string(priority) +
              " is not a priority level of the batcher (1.." +
              std::to_string(batcher_.policy().priority_levels) + ")"},
         out);
    return;
  }
  const uint64_t id = next_sequence_++;
  const QueuedSequence queued{id, static_cast<int>(item.ids.size()), now.steady,
                              item.deadline.on_steady_clock(now), priority};
  // max_queue_size bounds everything waiting here, encoded sequences waiting for decoder slots
  // included: under overload the excess is refused at once instead of expiring in a queue.
  if (batcher_.size() + decode_queue_.size() >= max_queue_size_ || !batcher_.enqueue(queued)) {
    fail(item, {protocol::ErrorCode::kOverloaded, "the batcher's queue is full; retry later"}, out);
    return;
  }
  batch_items_.emplace(id, Waiting<stage::SequenceItem>{now.steady, std::move(item)});
}

void BatcherHub::on_worker(Role role, const std::string& worker, stage::StageMessage&& message,
                           const Now& now) {
  const auto r = static_cast<size_t>(role);
  auto& credits = workers_[r];
  auto* encoded = role == Role::kEncoder ? std::get_if<stage::Encoded>(&message) : nullptr;
  auto* decoded = role == Role::kDecoder ? std::get_if<stage::Decoded>(&message) : nullptr;
  const auto* ready = std::get_if<stage::Ready>(&message);
  const auto* credit = std::get_if<stage::Credit>(&message);
  if (!ready && !credit && !encoded && !decoded &&
      !std::holds_alternative<stage::Heartbeat>(message)) {
    spdlog::warn("batcher: ignored a '{}' message from a {}", stage::kind_name(message),
                 kRoleNames[r]);
    metrics_.malformed();
    return;
  }
  const bool known = credits.free_credits(worker) >= 0;
  if (ready) {
    credits.announce(worker, ready->credits);
    liveness_[r].seen(worker, now.steady);
    spdlog::info("batcher: {} joined with {} credits ({} now)", kRoleNames[r], ready->credits,
                 credits.size());
    return;
  }
  if (!known) {
    // A worker declared dead that is still talking (it was stopped, not killed): its work went
    // to another replica. It will miss our heartbeats, reconnect and announce itself anew.
    const size_t late = encoded ? encoded->items.size() : decoded ? decoded->items.size() : 0;
    if (late > 0) {
      spdlog::info("batcher: dropped {} late item(s) from a {} declared dead", late, kRoleNames[r]);
      metrics_.late(static_cast<double>(late));
    }
    return;
  }
  liveness_[r].seen(worker, now.steady);
  if (credit) {
    credits.release(worker, credit->credits);
    // A postprocessor's credit message answers the oldest message sent to it.
    auto& held = postprocessing_[worker];
    if (role == Role::kPostprocessor && !held.empty()) held.pop_front();
  } else if (encoded) {
    credits.release(worker, encoded->credits);
    auto& held = encoding_[worker];  // one encoded message answers the oldest batch sent
    if (!held.empty()) held.pop_front();
    drop_cancelled(encoded->items);  // cancelled while an encoder had them
    // Encoded sequences wait for decoder slots by priority level too: each goes behind the last
    // of its level or a higher one (arrival order within a level, so a waiting beam search is
    // not overtaken by its own level).
    for (auto& item : encoded->items) {
      const int priority = level(item);
      auto at = std::find_if(decode_queue_.rbegin(), decode_queue_.rend(),
                             [&](const auto& w) { return level(w.item) <= priority; });
      decode_queue_.insert(at.base(), {now.steady, std::move(item)});
    }
  } else if (decoded) {
    credits.release(worker, decoded->credits);
    settle_decoded(worker, decoded->items);
    drop_cancelled(decoded->items);  // cancelled while a decoder had them
    for (auto& item : decoded->items) postprocess_queue_.push_back({now.steady, std::move(item)});
  }
}

int BatcherHub::level(const stage::WorkHeader& item) const {
  return item.params.priority == 0 ? default_priority_ : item.params.priority;
}

void BatcherHub::settle_decoded(const std::string& worker, std::vector<stage::DecodedItem>& items) {
  // Each finished item leaves the record; one not in it is a duplicate (its first decoder was
  // declared dead and it went to another) and goes no further.
  auto& held = decoding_[worker];
  size_t kept = 0;
  for (size_t n = 0; n < items.size(); ++n) {
    const stage::DecodedItem& item = items[n];
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

void BatcherHub::tick(const Now& now, Outbox& out) {
  if (!gateways_.empty() && now.steady >= next_gateway_heartbeat_) {
    // Answer the gateways that heartbeat us; forget one silent for 10 of its periods (gone).
    next_gateway_heartbeat_ = now.steady + heartbeat_interval_;
    std::erase_if(gateways_,
                  [&](const auto& g) { return now.steady - g.second > 10 * heartbeat_interval_; });
    for (const auto& [gateway, seen] : gateways_)
      out.to_gateways.emplace_back(gateway, stage::Heartbeat{ingress_endpoint_});
  }
  for (size_t r = 0; r < 3; ++r) {
    const auto role = static_cast<Role>(r);
    if (liveness_[r].heartbeat_due(now.steady)) {
      metrics_.heartbeats_missed(liveness_[r].silent(now.steady));
      for (const auto& worker : liveness_[r].workers())
        out.to_workers.push_back({role, worker, stage::Heartbeat{}});
      if (role == Role::kDecoder) {
        // Once per interval: forget what can no longer matter (the gateway has answered it).
        for (auto& [worker, held] : decoding_) {
          for (auto& m : held) {
            std::erase_if(m.items, [&](const stage::EncodedItem& item) {
              return item.deadline.expired(now);
            });
          }
          std::erase_if(held, [](const stage::Decode& m) { return m.items.empty(); });
        }
        std::erase_if(retried_, [&](const auto& kv) { return kv.second.expired(now); });
        // A cancel without a deadline is forgotten at once.
        std::erase_if(cancelled_,
                      [&](const auto& kv) { return kv.second.none() || kv.second.expired(now); });
      }
    }
    for (const auto& worker : liveness_[r].take_dead(now.steady))
      worker_dead(role, worker, now, out);
  }
}

void BatcherHub::dispatch(const Now& now, Outbox& out) {
  wakeup_ = kIdleWakeup;
  // Downstream first: sequences taken by decoders make room for new batches (backpressure).
  dispatch_queue(Role::kDecoder, decode_queue_, decoding_, out, now);
  dispatch_queue(Role::kPostprocessor, postprocess_queue_, postprocessing_, out, now);
  dispatch_batches(now, out);
  metrics_.set_queue_depth(static_cast<double>(queued()));
}

void BatcherHub::dispatch_batches(const Now& now, Outbox& out) {
  auto& encoders = workers_[static_cast<size_t>(Role::kEncoder)];
  // Deciding takes sequences out of the queue, so decide only when an encoder can take a batch;
  // until then the queue keeps growing toward a fuller batch.
  // Backpressure: no new batches while the decoders are behind (encoded sequences waiting for
  // slots), so encoder time is not spent on work that would only wait.
  while (batcher_.size() > 0 && encoders.largest_free() >= 1 &&
         decode_queue_.size() < decode_backlog_limit_) {
    const BatchDecision& decision = batcher_.poll(now.steady, batch_, expired_);
    for (const auto& e : expired_) {
      batch_items_.erase(e.id);  // the gateway answers deadline_exceeded
      metrics_.error(protocol::ErrorCode::kDeadlineExceeded);
    }
    if (decision.action != BatchDecision::Action::kSend) {
      if (decision.action == BatchDecision::Action::kWait)
        wakeup_ = std::min(wakeup_, decision.wait);
      break;
    }
    stage::Encode encode;
    encode.items.reserve(batch_.size());
    for (const auto& b : batch_) {
      auto it = batch_items_.find(b.id);
      auto& w = it->second;
      const uint64_t waited = micros(now.steady - w.since);
      w.item.timings.batch_wait_us += waited;
      metrics_.queue_time(static_cast<double>(waited) * 1e-6);
      encode.items.push_back(std::move(w.item));
      batch_items_.erase(it);
    }
    metrics_.batch_size(static_cast<double>(encode.items.size()));
    std::string worker = *encoders.take(1);
    encoding_[worker].push_back(encode);
    out.to_workers.push_back({Role::kEncoder, std::move(worker), std::move(encode)});
  }
}

template <class M, class Item>
void BatcherHub::dispatch_queue(Role role, std::deque<Waiting<Item>>& queue, InFlight<M>& in_flight,
                                Outbox& out, const Now& now) {
  auto& workers = workers_[static_cast<size_t>(role)];
  const size_t first =
      out.to_workers.size();  // this role's messages: one per worker, items appended
  while (!queue.empty()) {
    auto& w = queue.front();
    if (w.item.deadline.expired(now)) {
      metrics_.error(protocol::ErrorCode::kDeadlineExceeded);
      queue.pop_front();
      continue;
    }
    auto worker = workers.take(cost(role, w.item));
    if (!worker) break;  // in order: a beam search waiting for slots is not overtaken
    w.item.timings.queue_us += micros(now.steady - w.since);
    auto it = std::find_if(out.to_workers.begin() + static_cast<std::ptrdiff_t>(first),
                           out.to_workers.end(),
                           [&](const Outbox::ToWorker& m) { return m.worker == *worker; });
    if (it == out.to_workers.end()) {
      out.to_workers.push_back({role, std::move(*worker), M{}});
      it = out.to_workers.end() - 1;
    }
    std::get<M>(it->message).items.push_back(std::move(w.item));
    queue.pop_front();
  }
  for (size_t i = first; i < out.to_workers.size(); ++i)
    in_flight[out.to_workers[i].worker].push_back(std::get<M>(out.to_workers[i].message));
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

template <class M>
auto BatcherHub::take_lost(Role role, InFlight<M>& in_flight, const std::string& worker,
                           const Now& now, Outbox& out) {
  const auto r = static_cast<size_t>(role);
  std::vector<typename decltype(M::items)::value_type> again;
  auto node = in_flight.extract(worker);
  size_t held = 0;
  if (!node.empty()) {
    for (const auto& m : node.mapped()) held += m.items.size();
  }
  spdlog::warn(
      "batcher: {} replica declared dead ({} left); {} item(s) it held are re-dispatched or "
      "answered",
      kRoleNames[r], workers_[r].size(), held);
  if (node.empty()) return again;
  for (auto& m : node.mapped()) {
    for (auto& item : m.items) {
      if (item.deadline.expired(now) || is_cancelled(item))
        continue;  // answered by its gateway already
      const std::string key = item_key(item);
      if (retried_.count(key) != 0 || workers_[r].size() == 0) {
        fail(item,
             {protocol::ErrorCode::kUnavailable,
              retried_.count(key) != 0
                  ? std::string("two ") + kRoleNames[r] + " replicas failed on this item"
                  : std::string("the ") + kRoleNames[r] +
                        " holding this item died and no other is live"},
             out);
        continue;
      }
      retried_.emplace(key, item.deadline);
      metrics_.redispatched();
      again.push_back(std::move(item));
    }
  }
  return again;
}

void BatcherHub::worker_dead(Role role, const std::string& worker, const Now& now, Outbox& out) {
  const auto r = static_cast<size_t>(role);
  if (!workers_[r].remove(worker)) return;
  liveness_[r].forget(worker);
  metrics_.worker_dead();
  switch (role) {
    case Role::kEncoder:
      for (auto& item : take_lost(role, encoding_, worker, now, out))
        enqueue(std::move(item), now, out);  // batched anew
      break;
    case Role::kDecoder: {
      auto again = take_lost(role, decoding_, worker, now, out);
      for (auto it = again.rbegin(); it != again.rend(); ++it)
        decode_queue_.push_front({now.steady, std::move(*it)});  // first in line
      break;
    }
    case Role::kPostprocessor: {
      auto again = take_lost(role, postprocessing_, worker, now, out);
      for (auto it = again.rbegin(); it != again.rend(); ++it)
        postprocess_queue_.push_front({now.steady, std::move(*it)});
      break;
    }
  }
}

}  // namespace seqpipe::batcher
