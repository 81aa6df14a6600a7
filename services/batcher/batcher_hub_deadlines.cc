// The batcher hub's deadline-aware part: what it measures of serving times, the sequences it
// drops before computing them, and the per-stage queue gauges autoscalers read.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "batcher/batcher_hub.h"
#include "batcher/deadline_text.h"

namespace seqpipe::batcher {

namespace {

// Seconds since `since` (0 for a queue with nothing: time_point::max()).
double waited(Clock::time_point since, const Now& now) {
  return since == Clock::time_point::max()
             ? 0.0
             : std::max(0.0, std::chrono::duration<double>(now.steady - since).count());
}

template <class Queue>
Clock::time_point oldest(const Queue& queue) {
  Clock::time_point since = Clock::time_point::max();
  for (const auto& waiting : queue) since = std::min(since, waiting.since);
  return since;
}

}  // namespace

void BatcherHub::set_queue_metrics(Lane& l, const Now& now) {
  auto& [encoders, decoders, postprocessors] = l.queue_metrics;
  encoders.set(static_cast<double>(l.batcher.size()), waited(l.batcher.oldest(), now));
  decoders.set(static_cast<double>(l.decode_queue.size()), waited(oldest(l.decode_queue), now));
  postprocessors.set(static_cast<double>(l.postprocess_queue.size()),
                     waited(oldest(l.postprocess_queue), now));
}

bool BatcherHub::Lane::serving() const {
  const common::CreditQueue& e = encoders.credits();
  const common::CreditQueue& d = decoders.credits();
  return e.total_free() != e.total_capacity() || d.total_free() != d.total_capacity() ||
         !decode_queue.empty();
}

void BatcherHub::measure(Lane& l, const std::vector<stage::DecodedItem>& items, const Now& now) {
  Clock::duration total{};
  int answered = 0;
  for (const auto& item : items) {
    if (item.partial || item.deadline.none()) continue;
    auto it = taken_.find(hub::item_key(item));
    if (it == taken_.end() || !it->second.dispatched) continue;
    total += now.steady - *it->second.dispatched;
    ++answered;
    if (it->second.decoding) l.estimate.decoded_in(now.steady - *it->second.decoding);
  }
  if (answered > 0)
    l.estimate.answered(now.steady, answered, total / answered,
                        l.batcher.size() + l.decode_queue.size());
}

void BatcherHub::drop_expired(Lane& l, const Now& now, Outbox& out) {
  for (const auto& e : expired_) {
    auto it = batch_items_.find(e.id);
    if (it == batch_items_.end()) continue;
    l.metrics.error(protocol::ErrorCode::kDeadlineExceeded);
    l.metrics.expired_before_compute();
    if (e.deadline > now.steady) {  // not answered yet: its gateway hears now, not at the deadline
      fail(it->second.item,
           {protocol::ErrorCode::kDeadlineExceeded,
            "dropped before computing: serving takes about " +
                millis(l.estimate.latency().value_or(Clock::duration::zero())) +
                " now and its deadline is in " + millis(e.deadline - now.steady) + " (" +
                kDeadlineKeys + ")"},
           out);
    }
    batch_items_.erase(it);
  }
}

void BatcherHub::drop_late_encoded(Lane& l, const Now& now, Outbox& out) {
  const auto decode = l.estimate.decode_latency();
  const common::CreditQueue& slots = l.decoders.credits();
  // With idle decoders the estimate may be stale, and what waits goes now anyway.
  if (!decode || l.decode_queue.empty() || slots.total_free() == slots.total_capacity()) return;
  const Clock::time_point too_late = now.steady + *decode;
  std::erase_if(l.decode_queue, [&](const Waiting<stage::EncodedItem>& w) {
    const Clock::time_point deadline = w.item.deadline.on_steady_clock(now);
    if (deadline > too_late || deadline <= now.steady) return false;  // passed: dispatch_queue's
    l.metrics.error(protocol::ErrorCode::kDeadlineExceeded);
    l.metrics.expired_before_compute();
    fail(w.item,
         {protocol::ErrorCode::kDeadlineExceeded,
          "dropped before decoding: decoding takes about " + millis(*decode) +
              " now and its deadline is in " + millis(deadline - now.steady) + " (" +
              kDeadlineKeys + ")"},
         out);
    return true;
  });
}

void BatcherHub::note_decoding(size_t first, const Now& now, const Outbox& out) {
  for (size_t i = first; i < out.sends.size(); ++i) {
    const auto* decode = std::get_if<stage::Decode>(&out.sends[i].message);
    if (!decode) continue;
    for (const auto& item : decode->items) {
      if (item.deadline.none()) continue;
      auto it = taken_.find(hub::item_key(item));
      if (it != taken_.end()) it->second.decoding = now.steady;
    }
  }
}

}  // namespace seqpipe::batcher
