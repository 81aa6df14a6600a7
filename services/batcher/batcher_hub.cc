#include "batcher/batcher_hub.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "seqpipe/common/service.h"

namespace seqpipe::batcher {

namespace {
constexpr std::chrono::microseconds kIdleWakeup{100000};
constexpr const char* kRoleNames[] = {"encoder", "decoder", "postprocessor"};

uint64_t micros(Clock::duration d) {
  return static_cast<uint64_t>(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
}
int cost(Role role, const stage::WorkItem& item) { return role == Role::kDecoder ? std::max(1, item.params.num_beams) : 1; }
}  // namespace

BatchPolicy batch_policy(const config::BatcherConfig& c) {
  BatchPolicy p;
  p.max_batch_size = c.max_batch_size;
  p.preferred_batch_sizes = c.preferred_batch_sizes;
  p.max_queue_delay = std::chrono::microseconds(c.max_queue_delay_us);
  p.max_batch_tokens = c.max_batch_tokens;
  p.max_queue_size = c.max_queue_size;
  return p;
}

BatcherHub::BatcherHub(const config::PipelineConfig& config, metrics::StageMetrics& metrics)
    : metrics_(metrics), batcher_(batch_policy(config.batcher)) {
  batch_.reserve(static_cast<size_t>(config.batcher.max_batch_size));
}

void BatcherHub::on_sequences(stage::StageMessage&& message, Clock::time_point now, Outbox& out) {
  if (message.kind != stage::MessageKind::kSequence) {
    spdlog::warn("batcher: ignored a '{}' message on the ingress socket", stage::kind_name(message.kind));
    metrics_.malformed();
    return;
  }
  metrics_.request(static_cast<double>(message.items.size()));
  for (auto& item : message.items) enqueue(std::move(item), now, &out);
}

void BatcherHub::enqueue(stage::WorkItem&& item, Clock::time_point now, Outbox* out) {
  const int64_t left_us = item.deadline_unix_us == 0 ? int64_t{3600} * 1000000
                                                     : item.deadline_unix_us - service::unix_now_us();
  if (item.ids.empty()) {
    if (out) {
      metrics_.error(protocol::ErrorCode::kInternal);
      item.error = protocol::Error{protocol::ErrorCode::kInternal, "batcher received a sequence without ids"};
      std::string gateway = item.gateway;
      out->to_gateways.emplace_back(std::move(gateway), stage::StageMessage{stage::MessageKind::kResult, 0, {std::move(item)}});
    }
    return;
  }
  const uint64_t id = next_sequence_++;
  const QueuedSequence queued{id, static_cast<int>(item.ids.size()), now, now + std::chrono::microseconds(left_us)};
  if (!batcher_.enqueue(queued)) {
    metrics_.error(protocol::ErrorCode::kOverloaded);
    spdlog::warn("batcher: request {} item {}: queue full ({} sequences); overloaded", item.request, item.index,
                 batcher_.size());
    if (out) {
      item.ids.clear();
      item.error = protocol::Error{protocol::ErrorCode::kOverloaded, "the batcher's queue is full; retry later"};
      std::string gateway = item.gateway;
      out->to_gateways.emplace_back(std::move(gateway), stage::StageMessage{stage::MessageKind::kResult, 0, {std::move(item)}});
    }
    return;
  }
  batch_items_.emplace(id, Waiting{now, std::move(item)});
}

void BatcherHub::on_worker(Role role, const std::string& worker, stage::StageMessage&& message, Clock::time_point now) {
  auto& credits = workers_[static_cast<size_t>(role)];
  using stage::MessageKind;
  const bool expected = message.kind == MessageKind::kReady || message.kind == MessageKind::kCredit ||
                        (role == Role::kEncoder && message.kind == MessageKind::kEncoded) ||
                        (role == Role::kDecoder && message.kind == MessageKind::kDecoded);
  if (!expected) {
    spdlog::warn("batcher: ignored a '{}' message from a {}", stage::kind_name(message.kind),
                 kRoleNames[static_cast<size_t>(role)]);
    metrics_.malformed();
    return;
  }
  if (message.kind == MessageKind::kReady) {
    credits.announce(worker, message.credits);
    spdlog::info("batcher: {} joined with {} credits ({} now)", kRoleNames[static_cast<size_t>(role)], message.credits,
                 credits.size());
    return;
  }
  credits.release(worker, message.credits);
  auto& next = role == Role::kEncoder ? decode_queue_ : postprocess_queue_;
  for (auto& item : message.items) next.push_back({now, std::move(item)});
}

void BatcherHub::dispatch(Clock::time_point now, Outbox& out) {
  wakeup_ = kIdleWakeup;
  dispatch_batches(now, out);
  dispatch_queue(Role::kDecoder, decode_queue_, now, out);
  dispatch_queue(Role::kPostprocessor, postprocess_queue_, now, out);
  metrics_.set_queue_depth(static_cast<double>(queued()));
}

void BatcherHub::dispatch_batches(Clock::time_point now, Outbox& out) {
  auto& encoders = workers_[static_cast<size_t>(Role::kEncoder)];
  // Deciding takes sequences out of the queue, so decide only when an encoder can take a batch;
  // until then the queue keeps growing toward a fuller batch.
  while (batcher_.size() > 0 && encoders.largest_free() >= 1) {
    const BatchDecision& decision = batcher_.poll(now, batch_, expired_);
    for (const auto& e : expired_) {
      batch_items_.erase(e.id);  // the gateway answers deadline_exceeded
      metrics_.error(protocol::ErrorCode::kDeadlineExceeded);
    }
    if (decision.action != BatchDecision::Action::kSend) {
      if (decision.action == BatchDecision::Action::kWait) wakeup_ = std::min(wakeup_, decision.wait);
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
    out.to_workers.push_back({Role::kEncoder, *encoders.take(1), std::move(encode)});
  }
}

void BatcherHub::dispatch_queue(Role role, std::deque<Waiting>& queue, Clock::time_point now, Outbox& out) {
  auto& workers = workers_[static_cast<size_t>(role)];
  const stage::MessageKind kind = role == Role::kDecoder ? stage::MessageKind::kDecode : stage::MessageKind::kPostprocess;
  const size_t first = out.to_workers.size();  // this role's messages: one per worker, items appended
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
    auto it = std::find_if(out.to_workers.begin() + static_cast<std::ptrdiff_t>(first), out.to_workers.end(),
                           [&](const Outbox::ToWorker& m) { return m.worker == *worker; });
    if (it == out.to_workers.end()) {
      out.to_workers.push_back({role, std::move(*worker), {kind, 0, {}}});
      it = out.to_workers.end() - 1;
    }
    it->message.items.push_back(std::move(w.item));
    queue.pop_front();
  }
}

std::vector<status::StageStatus> BatcherHub::status() const {
  std::vector<status::StageStatus> stages{{"batcher", 1, 0, static_cast<int>(batcher_.size()), 0}};
  const size_t queued[] = {0, decode_queue_.size(), postprocess_queue_.size()};
  for (size_t r = 0; r < 3; ++r) {
    const auto& w = workers_[r];
    stages.push_back({kRoleNames[r], static_cast<int>(w.size()), w.total_capacity() - w.total_free(),
                      static_cast<int>(queued[r]), w.total_free()});
  }
  return stages;
}

void BatcherHub::worker_gone(Role role, const std::string& worker, stage::StageMessage&& undelivered,
                             Clock::time_point now) {
  workers_[static_cast<size_t>(role)].remove(worker);
  spdlog::warn("batcher: a {} went away; {} item(s) sent to it wait again", kRoleNames[static_cast<size_t>(role)],
               undelivered.items.size());
  for (auto it = undelivered.items.rbegin(); it != undelivered.items.rend(); ++it) {
    if (role == Role::kEncoder) {
      enqueue(std::move(*it), now, nullptr);
    } else {
      (role == Role::kDecoder ? decode_queue_ : postprocess_queue_).push_front({now, std::move(*it)});
    }
  }
}

}  // namespace seqpipe::batcher
