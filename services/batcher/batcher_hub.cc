#include "batcher/batcher_hub.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "batcher/deadline_text.h"

namespace seqpipe::batcher {

namespace {
constexpr std::chrono::microseconds kIdleWakeup{100000};
constexpr const char* kRoleNames[] = {"encoder", "decoder", "postprocessor"};

uint64_t micros(Clock::duration d) {
  return static_cast<uint64_t>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
}
// Credits an item costs a worker: its KV-cache slots on a decoder, else 1.
int cost(const hub::WorkerPool<stage::Decode>&, const stage::WorkHeader& item) {
  return generation::slot_cost(item.params.num_beams);
}
int cost(const hub::WorkerPool<stage::Postprocess>&, const stage::WorkHeader&) {
  return 1;
}
std::string request_key(const std::string& gateway, uint64_t request) {
  return gateway + '\n' + std::to_string(request);
}
bool same_request(const stage::WorkHeader& a, const stage::RequestRef& b) {
  return a.request == b.request && a.gateway == b.gateway;
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

BatcherHub::Lane::Lane(const config::BatcherConfig& batcher_config,
                       const config::LivenessConfig& liveness, metrics::StageMetrics& hub_metrics,
                       const std::string& model)
    : labelled(model.empty() ? std::nullopt : std::optional(hub_metrics.for_model(model))),
      metrics(labelled ? *labelled : hub_metrics),
      batcher(batch_policy(batcher_config)),
      encoders({"batcher", "encoder", link(Role::kEncoder), hub::Answers::kInOrder}, liveness,
               metrics),
      decoders({"batcher", "decoder", link(Role::kDecoder), hub::Answers::kByItem}, liveness,
               metrics),
      postprocessors(
          {"batcher", "postprocessor", link(Role::kPostprocessor), hub::Answers::kInOrder},
          liveness, metrics),
      queue_metrics{metrics.queue_for("encoder"), metrics.queue_for("decoder"),
                    metrics.queue_for("postprocessor")} {}

BatcherHub::BatcherHub(const config::BatcherConfig& batcher, const config::LivenessConfig& liveness,
                       metrics::StageMetrics& metrics)
    : batcher_config_(batcher),
      liveness_(liveness),
      metrics_(metrics),
      max_queue_size_(static_cast<size_t>(batcher.max_queue_size)),
      default_priority_(batcher.default_priority_level),
      ingress_endpoint_(batcher.ingress_endpoint),
      incarnation_(hub::draw_incarnation()),
      heartbeat_interval_(liveness.heartbeat_interval_ms),
      decode_backlog_limit_(2 * static_cast<size_t>(batcher.max_batch_size)) {
  batch_.reserve(static_cast<size_t>(batcher.max_batch_size));
}

BatcherHub::Lane& BatcherHub::lane(const std::string& model) {
  auto it = lanes_.find(model);
  if (it == lanes_.end()) {
    it = lanes_.try_emplace(model, batcher_config_, liveness_, metrics_, model).first;
    if (!model.empty()) spdlog::info("batcher: serving model {}", model);
  }
  return it->second;
}

BatcherHub::Lane* BatcherHub::lane_of(Role role, const std::string& worker) {
  auto& models = lane_of_[link(role)];
  auto it = models.find(worker);
  return it == models.end() ? nullptr : &lane(it->second);
}

const common::CreditQueue& BatcherHub::credits(Role role, const std::string& model) const {
  static const common::CreditQueue kNone;
  auto it = lanes_.find(model);
  if (it == lanes_.end()) return kNone;
  switch (role) {
    case Role::kEncoder:
      return it->second.encoders.credits();
    case Role::kDecoder:
      return it->second.decoders.credits();
    case Role::kPostprocessor:
      break;
  }
  return it->second.postprocessors.credits();
}

size_t BatcherHub::queued() const {
  size_t n = 0;
  for (const auto& [model, l] : lanes_)
    n += l.batcher.size() + l.decode_queue.size() + l.postprocess_queue.size();
  return n;
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
  for (auto& item : sequences->items) {
    // A second copy is dropped. Items without a deadline are not remembered (nothing would ever
    // forget them); gateways give every item one.
    if (!item.deadline.none() &&
        !taken_.emplace(hub::item_key(item), Taken{item.deadline, {}, {}}).second) {
      metrics_.duplicate();
      continue;
    }
    enqueue(std::move(item), now, out);
  }
}

void BatcherHub::fail(const stage::WorkHeader& item, protocol::Error error, Outbox& out) {
  out.fail(item, std::move(error), "batcher", metrics_);
}

template <class Item>
void BatcherHub::fail_lost(const std::vector<std::pair<Item, std::string>>& failed, Outbox& out) {
  for (const auto& [item, why] : failed) fail(item, {protocol::ErrorCode::kUnavailable, why}, out);
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
        lane(it->second.item.model).batcher.remove(it->first);
        it = batch_items_.erase(it);
        ++dropped;
      } else {
        ++it;
      }
    }
    // Waiting for a decoder or a postprocessor.
    auto waiting = [&](const auto& w) { return same_request(w.item, request); };
    for (auto& [model, l] : lanes_) {
      dropped +=
          std::erase_if(l.decode_queue, waiting) + std::erase_if(l.postprocess_queue, waiting);
      // Running on a decoder: it stops them and returns their slots as credits. They leave the
      // decoder's record now, so a late answer is dropped and a dead decoder's work is not
      // re-sent.
      l.decoders.drop_held(
          [&](const stage::EncodedItem& item) { return same_request(item, request); },
          [&](const std::string& worker, size_t n) {
            dropped += n;
            out.sends.push_back({link(Role::kDecoder), worker, stage::Cancel{{request}}});
          });
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
  Lane& l = lane(item.model);
  const int priority = level(item);
  if (priority >
      l.batcher.policy().priority_levels) {  // the gateway checks it; its config may differ
    fail(item,
         {protocol::ErrorCode::kInvalidArgument,
          "params.priority " + std::to_string(priority) +
              " is not a priority level of the batcher (1.." +
              std::to_string(l.batcher.policy().priority_levels) + ")"},
         out);
    return;
  }
  const uint64_t id = next_sequence_++;
  const QueuedSequence queued{id, static_cast<int>(item.ids.size()), now.steady,
                              item.deadline.on_steady_clock(now), priority};
  // Deadline-aware admission: refused at once what could not be answered in time behind the
  // queue ahead, rather than queued to expire (or to be computed for nobody).
  if (l.serving()) {
    const Clock::time_point finish = l.estimate.finish(now.steady, l.batcher.size());
    if (finish > queued.deadline) {
      l.metrics.expired_before_compute();
      fail(item,
           {protocol::ErrorCode::kOverloaded,
            "it could not be answered before its deadline (in " +
                millis(queued.deadline - now.steady) + "; " + kDeadlineKeys +
                "): " + std::to_string(l.batcher.size()) + " sequences are queued ahead, about " +
                millis(finish - now.steady) + " of work at the measured pace; retry later"},
           out);
      return;
    }
  }
  // max_queue_size bounds everything waiting here, encoded sequences waiting for decoder slots
  // included: under overload the excess is refused at once instead of expiring in a queue.
  if (l.batcher.size() + l.decode_queue.size() >= max_queue_size_ || !l.batcher.enqueue(queued)) {
    fail(item, {protocol::ErrorCode::kOverloaded, "the batcher's queue is full; retry later"}, out);
    return;
  }
  batch_items_.emplace(id, Waiting<stage::SequenceItem>{now.steady, std::move(item)});
}

void BatcherHub::on_worker(Role role, const std::string& worker, stage::StageMessage&& message,
                           const Now& now) {
  auto* encoded = role == Role::kEncoder ? std::get_if<stage::Encoded>(&message) : nullptr;
  auto* decoded = role == Role::kDecoder ? std::get_if<stage::Decoded>(&message) : nullptr;
  const auto* ready = std::get_if<stage::Ready>(&message);
  const auto* credit = std::get_if<stage::Credit>(&message);
  if (!ready && !credit && !encoded && !decoded &&
      !std::holds_alternative<stage::Heartbeat>(message)) {
    spdlog::warn("batcher: ignored a '{}' message from a {}", stage::kind_name(message),
                 kRoleNames[link(role)]);
    metrics_.malformed();
    return;
  }
  if (ready) lane_of_[link(role)][worker] = ready->model;  // the version it serves
  Lane* l = lane_of(role, worker);
  if (!l) return;  // never announced itself: it will when it reconnects
  // What every pool does with ready / credit / heartbeat; true for a member's message, which
  // goes further.
  auto control = [&](auto& pool) {
    if (ready) {
      pool.ready(worker, ready->credits, now.steady);
      return false;
    }
    if (!pool.heard(worker, now.steady)) {
      const size_t late = encoded ? encoded->items.size() : decoded ? decoded->items.size() : 0;
      if (late > 0) {
        spdlog::info("batcher: dropped {} late item(s) from a {} declared dead", late,
                     pool.info().stage);
        l->metrics.late(static_cast<double>(late));
      }
      return false;
    }
    if (credit) pool.release(worker, credit->credits);
    return true;
  };
  switch (role) {
    case Role::kEncoder:
      if (control(l->encoders) && encoded) on_encoder(*l, worker, *encoded, now);
      return;
    case Role::kDecoder:
      if (control(l->decoders) && decoded) on_decoder(*l, worker, *decoded, now);
      return;
    case Role::kPostprocessor:
      // A postprocessor's credit message answers the oldest message sent to it.
      if (control(l->postprocessors) && credit) l->postprocessors.answered(worker);
      return;
  }
}

void BatcherHub::on_encoder(Lane& l, const std::string& worker, stage::Encoded& encoded,
                            const Now& now) {
  l.encoders.release(worker, encoded.credits);
  l.encoders.answered(worker);    // one encoded message answers the oldest batch sent
  drop_cancelled(encoded.items);  // cancelled while an encoder had them
  // Encoded sequences wait for decoder slots by priority level too: each goes behind the
  // last of its level or a higher one (arrival order within a level, so a waiting beam
  // search is not overtaken by its own level).
  for (auto& item : encoded.items) {
    const int priority = level(item);
    auto at = std::find_if(l.decode_queue.rbegin(), l.decode_queue.rend(),
                           [&](const auto& w) { return level(w.item) <= priority; });
    l.decode_queue.insert(at.base(), {now.steady, std::move(item)});
  }
}

void BatcherHub::on_decoder(Lane& l, const std::string& worker, stage::Decoded& decoded,
                            const Now& now) {
  l.decoders.release(worker, decoded.credits);
  // Each finished item leaves the decoder's record; one not in it is a duplicate (its first
  // decoder was declared dead and it went to another) and goes no further. A partial
  // (streaming) answers nothing and is not re-sent if lost: it goes on as it is.
  const size_t before = decoded.items.size();
  std::erase_if(decoded.items, [&](const stage::DecodedItem& item) {
    return !item.partial && !l.decoders.answered(worker, item);
  });
  if (decoded.items.size() != before)
    l.metrics.late(static_cast<double>(before - decoded.items.size()));
  drop_cancelled(decoded.items);  // cancelled while a decoder had them
  measure(l, decoded.items, now);
  for (auto& item : decoded.items) {
    // Only a streamed sequence's newest ids matter: they replace its partial still waiting
    // here, so a decoder faster than the postprocessors does not pile partials up.
    if (item.partial) {
      auto waiting =
          std::find_if(l.postprocess_queue.begin(), l.postprocess_queue.end(), [&](const auto& w) {
            return w.item.partial && w.item.request == item.request && w.item.index == item.index &&
                   w.item.gateway == item.gateway;
          });
      if (waiting != l.postprocess_queue.end()) {
        waiting->item = std::move(item);
        continue;
      }
    }
    l.postprocess_queue.push_back({now.steady, std::move(item)});
  }
}

int BatcherHub::level(const stage::WorkHeader& item) const {
  return item.params.priority == 0 ? default_priority_ : item.params.priority;
}

void BatcherHub::tick(const Now& now, Outbox& out) {
  if (!gateways_.empty() && now.steady >= next_gateway_heartbeat_) {
    // Answer the gateways that heartbeat us; forget one silent for 10 of its periods (gone).
    next_gateway_heartbeat_ = now.steady + heartbeat_interval_;
    std::erase_if(gateways_,
                  [&](const auto& g) { return now.steady - g.second > 10 * heartbeat_interval_; });
    for (const auto& [gateway, seen] : gateways_)
      out.pushes.emplace_back(gateway, stage::Heartbeat{ingress_endpoint_, incarnation_});
  }
  // The workers each lane's pools find dead: collected first, as worker_dead changes the lanes.
  std::vector<std::pair<Role, std::string>> dead;
  bool beat = false;
  for (auto& [model, l] : lanes_) {
    bool b = false;
    for (auto& worker : l.encoders.tick(now, out)) dead.emplace_back(Role::kEncoder, worker);
    for (auto& worker : l.decoders.tick(now, out, &b)) dead.emplace_back(Role::kDecoder, worker);
    for (auto& worker : l.postprocessors.tick(now, out))
      dead.emplace_back(Role::kPostprocessor, worker);
    beat = beat || b;
  }
  for (const auto& [role, worker] : dead) worker_dead(role, worker, now, out);
  if (beat || lanes_.empty()) {
    // Once per interval: forget cancels that can no longer matter (a cancel without a deadline
    // is forgotten at once).
    std::erase_if(cancelled_,
                  [&](const auto& kv) { return kv.second.none() || kv.second.expired(now); });
    std::erase_if(taken_, [&](const auto& kv) { return kv.second.deadline.expired(now); });
  }
}

void BatcherHub::dispatch(const Now& now, Outbox& out) {
  wakeup_ = kIdleWakeup;
  for (auto& [model, l] : lanes_) {
    // Downstream first: sequences taken by decoders make room for new batches (backpressure).
    drop_late_encoded(l, now, out);
    const size_t first = out.sends.size();
    dispatch_queue(l, l.decoders, l.decode_queue, now, out);
    note_decoding(first, now, out);
    dispatch_queue(l, l.postprocessors, l.postprocess_queue, now, out);
    dispatch_batches(l, now, out);
    l.metrics.set_queue_depth(
        static_cast<double>(l.batcher.size() + l.decode_queue.size() + l.postprocess_queue.size()));
    set_queue_metrics(l, now);
  }
}

void BatcherHub::dispatch_batches(Lane& l, const Now& now, Outbox& out) {
  // Deciding takes sequences out of the queue, so decide only when an encoder can take a batch;
  // until then the queue keeps growing toward a fuller batch.
  // Backpressure: no new batches while the decoders are behind (encoded sequences waiting for
  // slots), so encoder time is not spent on work that would only wait.
  while (l.batcher.size() > 0 && l.encoders.largest_free() >= 1 &&
         l.decode_queue.size() < decode_backlog_limit_) {
    const common::CreditQueue& encoders = l.encoders.credits();
    const int in_flight =
        encoders.total_capacity() - encoders.total_free();  // an encoder's credit: a batch
    // With nothing being served the estimate may be stale (measured under another load), and
    // a sequence sent now meets no queue: only deadlines passed count.
    const Clock::duration service = l.serving()
                                        ? l.estimate.latency().value_or(Clock::duration::zero())
                                        : Clock::duration::zero();
    const BatchDecision& decision =
        l.batcher.poll(now.steady, in_flight, batch_, expired_, service);
    drop_expired(l, now, out);
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
      l.metrics.queue_time(static_cast<double>(waited) * 1e-6);
      if (!w.item.deadline.none()) {
        auto taken = taken_.find(hub::item_key(w.item));
        if (taken != taken_.end()) taken->second.dispatched = now.steady;
      }
      encode.items.push_back(std::move(w.item));
      batch_items_.erase(it);
    }
    l.metrics.batch_size(static_cast<double>(encode.items.size()));
    std::string worker = *l.encoders.take(1);
    l.encoders.sent(worker, encode);
    out.sends.push_back({link(Role::kEncoder), std::move(worker), std::move(encode)});
  }
}

template <class Work, class Item>
void BatcherHub::dispatch_queue(Lane& l, hub::WorkerPool<Work>& pool,
                                std::deque<Waiting<Item>>& queue, const Now& now, Outbox& out) {
  const size_t to = pool.info().link;
  const size_t first = out.sends.size();  // this pool's messages: one per worker, items appended
  while (!queue.empty()) {
    auto& w = queue.front();
    if (w.item.deadline.expired(now)) {
      l.metrics.error(protocol::ErrorCode::kDeadlineExceeded);
      l.metrics.expired_before_compute();
      queue.pop_front();
      continue;
    }
    auto worker = pool.take(cost(pool, w.item));
    if (!worker) break;  // in order: a beam search waiting for slots is not overtaken
    w.item.timings.queue_us += micros(now.steady - w.since);
    auto it = std::find_if(out.sends.begin() + static_cast<std::ptrdiff_t>(first), out.sends.end(),
                           [&](const Outbox::Send& m) { return m.peer == *worker; });
    if (it == out.sends.end()) {
      out.sends.push_back({to, std::move(*worker), Work{}});
      it = out.sends.end() - 1;
    }
    std::get<Work>(it->message).items.push_back(std::move(w.item));
    queue.pop_front();
  }
  for (size_t i = first; i < out.sends.size(); ++i)
    pool.sent(out.sends[i].peer, std::get<Work>(out.sends[i].message));
}

std::vector<status::StageStatus> BatcherHub::status() const {
  size_t waiting = 0;
  for (const auto& [model, l] : lanes_) waiting += l.batcher.size();
  std::vector<status::StageStatus> lines = {{.stage = "batcher",
                                             .replicas = 1,
                                             .in_flight = 0,
                                             .queued = static_cast<int>(waiting),
                                             .free_credits = status::kNoCredits}};
  const std::string none;
  auto add = [&](status::StageStatus line, const std::string& model) {
    if (!model.empty()) line.stage += " " + model;  // which version's workers
    lines.push_back(std::move(line));
  };
  for (const auto& [model, l] : lanes_) {
    add(l.encoders.status(0), model);
    add(l.decoders.status(static_cast<int>(l.decode_queue.size())), model);
    add(l.postprocessors.status(static_cast<int>(l.postprocess_queue.size())), model);
  }
  if (lanes_.empty()) {  // no worker yet: each stage's line, empty
    const Lane empty(batcher_config_, liveness_, metrics_, "");
    add(empty.encoders.status(0), none);
    add(empty.decoders.status(0), none);
    add(empty.postprocessors.status(0), none);
  }
  return lines;
}

void BatcherHub::worker_dead(Role role, const std::string& worker, const Now& now, Outbox& out) {
  Lane* l = lane_of(role, worker);
  if (!l) return;
  lane_of_[link(role)].erase(worker);
  auto cancelled = [&](const stage::WorkHeader& item) { return is_cancelled(item); };
  switch (role) {
    case Role::kEncoder: {
      auto lost = l->encoders.remove(worker, now, cancelled);
      fail_lost(lost.failed, out);
      for (auto& item : lost.again) enqueue(std::move(item), now, out);  // batched anew
      break;
    }
    case Role::kDecoder: {
      auto lost = l->decoders.remove(worker, now, cancelled);
      fail_lost(lost.failed, out);
      for (auto it = lost.again.rbegin(); it != lost.again.rend(); ++it)
        l->decode_queue.push_front({now.steady, std::move(*it)});  // first in line
      break;
    }
    case Role::kPostprocessor: {
      auto lost = l->postprocessors.remove(worker, now, cancelled);
      fail_lost(lost.failed, out);
      for (auto it = lost.again.rbegin(); it != lost.again.rend(); ++it)
        l->postprocess_queue.push_front({now.steady, std::move(*it)});
      break;
    }
  }
}

}  // namespace seqpipe::batcher
