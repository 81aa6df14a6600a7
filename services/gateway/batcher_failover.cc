#include "gateway/batcher_failover.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace seqpipe::gateway {

BatcherFailover::BatcherFailover(const config::PipelineConfig& config, std::string results_endpoint)
    : results_endpoint_(std::move(results_endpoint)),
      interval_(config.liveness.heartbeat_interval_ms),
      timeout_(std::chrono::milliseconds(config.liveness.heartbeat_interval_ms) *
               config.liveness.heartbeat_liveness) {
  for (const auto& endpoint : config.gateway.batcher_endpoints) batchers_.push_back({endpoint});
  if (batchers_.empty()) batchers_.push_back({config.batcher.ingress_endpoint});
}

size_t BatcherFailover::live() const {
  return static_cast<size_t>(
      std::count_if(batchers_.begin(), batchers_.end(), [](const Link& b) { return b.live; }));
}

std::vector<std::string> BatcherFailover::endpoints() const {
  std::vector<std::string> out;
  for (const auto& b : batchers_) out.push_back(b.endpoint);
  return out;
}

std::optional<size_t> BatcherFailover::next_live(size_t after) const {
  for (size_t k = 1; k <= batchers_.size(); ++k) {
    const size_t i = (after + k) % batchers_.size();
    if (batchers_[i].live) return i;
  }
  return std::nullopt;
}

bool BatcherFailover::assign(uint64_t request) {
  if (!several()) return true;
  const auto batcher = next_live(last_);
  if (!batcher) return false;
  last_ = *batcher;
  held_[request] = {*batcher, false};
  return true;
}

std::string BatcherFailover::target(uint64_t request) const {
  if (!several()) return {};
  auto it = held_.find(request);
  return it == held_.end() ? std::string() : batchers_[it->second.batcher].endpoint;
}

void BatcherFailover::forget(uint64_t request) {
  if (several()) held_.erase(request);
}

void BatcherFailover::heard(const std::string& from, SteadyClock::time_point now) {
  for (auto& b : batchers_) {
    if (b.endpoint != from) continue;
    b.last_seen = now;
    if (!b.live) spdlog::info("gateway: batcher {} is live again", b.endpoint);
    b.live = true;
  }
}

BatcherFailover::Failover BatcherFailover::tick(SteadyClock::time_point now, Outbox& out) {
  Failover failover;
  if (!several()) return failover;
  if (now >= next_heartbeat_) {
    next_heartbeat_ = now + interval_;
    for (const auto& b : batchers_)  // naming where the batcher answers
      out.pushes.emplace_back(b.endpoint, stage::Heartbeat{results_endpoint_});
  }
  for (size_t i = 0; i < batchers_.size(); ++i) {
    if (batchers_[i].last_seen == SteadyClock::time_point{})
      batchers_[i].last_seen = now;  // a full period to answer
    if (batchers_[i].live && now - batchers_[i].last_seen > timeout_) dead(i, failover);
  }
  return failover;
}

void BatcherFailover::dead(size_t index, Failover& failover) {
  batchers_[index].live = false;
  ++failover.dead;
  std::vector<uint64_t> held;
  for (const auto& [request, h] : held_) {
    if (h.batcher == index) held.push_back(request);
  }
  std::sort(held.begin(), held.end());  // in arrival order
  spdlog::warn(
      "gateway: batcher {} is silent ({} of {} live); {} request(s) it held are re-submitted or "
      "answered",
      batchers_[index].endpoint, live(), batchers_.size(), held.size());
  for (uint64_t request : held) {
    Held& h = held_[request];
    const auto other = next_live(index);
    if (h.resubmitted || !other) {
      failover.lost.emplace_back(
          request, h.resubmitted ? "two batchers failed on this request"
                                 : "the batcher holding this request died and no other is live");
      continue;
    }
    h.resubmitted = true;
    h.batcher = *other;
    failover.moved.push_back(request);
  }
}

}  // namespace seqpipe::gateway
