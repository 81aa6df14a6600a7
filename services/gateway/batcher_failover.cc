#include "gateway/batcher_failover.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "seqpipe/config/batcher_config.h"
#include "seqpipe/config/gateway_config.h"
#include "seqpipe/config/liveness_config.h"

namespace seqpipe::gateway {

BatcherFailover::BatcherFailover(const config::PipelineConfig& config, std::string results_endpoint)
    : results_endpoint_(std::move(results_endpoint)),
      interval_(config::liveness_of(config).heartbeat_interval_ms),
      timeout_(std::chrono::milliseconds(config::liveness_of(config).heartbeat_interval_ms) *
               config::liveness_of(config).heartbeat_liveness) {
  for (const auto& endpoint : config::gateway_of(config).batcher_endpoints)
    batchers_.push_back({endpoint});
  if (batchers_.empty()) batchers_.push_back({config::batcher_of(config).ingress_endpoint});
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
  size_t batcher = 0;
  if (several()) {
    const auto next = next_live(last_);
    if (!next) return false;
    batcher = last_ = *next;
  }
  held_[request] = {batcher};
  return true;
}

std::string BatcherFailover::target(uint64_t request) const {
  if (!several()) return {};
  auto it = held_.find(request);
  return it == held_.end() ? std::string() : batchers_[it->second.batcher].endpoint;
}

void BatcherFailover::forget(uint64_t request) {
  held_.erase(request);
}

BatcherFailover::Failover BatcherFailover::heard(const std::string& from, uint64_t incarnation,
                                                 SteadyClock::time_point now) {
  Failover failover;
  for (size_t i = 0; i < batchers_.size(); ++i) {
    Link& b = batchers_[i];
    if (b.endpoint != from) continue;
    const bool restarted = b.incarnation != 0 && incarnation != 0 && incarnation != b.incarnation;
    const bool back = !b.live;
    b.last_seen = now;
    b.live = true;
    if (incarnation != 0) b.incarnation = incarnation;
    if (!restarted && !back) continue;
    std::vector<uint64_t> again;
    for (const auto& [request, h] : held_) {
      if ((restarted && h.batcher == i && !h.waiting) || (back && h.waiting))
        again.push_back(request);
    }
    std::sort(again.begin(), again.end());  // in arrival order
    spdlog::info("gateway: batcher {} is {}; {} request(s) are submitted to it again", b.endpoint,
                 restarted ? "back, restarted" : "live again", again.size());
    for (uint64_t request : again)
      resubmit(request, i, "the batcher holding this request restarted twice", failover);
  }
  return failover;
}

BatcherFailover::Failover BatcherFailover::tick(SteadyClock::time_point now, Outbox& out) {
  Failover failover;
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

void BatcherFailover::resubmit(uint64_t request, size_t to, const std::string& why,
                               Failover& failover) {
  Held& h = held_[request];
  h.waiting = false;
  if (h.resubmitted) {
    failover.lost.emplace_back(request, why);
    return;
  }
  h.resubmitted = true;
  h.batcher = to;
  failover.moved.push_back(request);
}

void BatcherFailover::dead(size_t index, Failover& failover) {
  batchers_[index].live = false;
  ++failover.dead;
  std::vector<uint64_t> held;
  for (const auto& [request, h] : held_) {
    if (h.batcher == index && !h.waiting) held.push_back(request);
  }
  std::sort(held.begin(), held.end());  // in arrival order
  const auto other = next_live(index);
  spdlog::warn("gateway: batcher {} is silent ({} of {} live); {} request(s) it held are {}",
               batchers_[index].endpoint, live(), batchers_.size(), held.size(),
               other ? "submitted to another" : "kept until a batcher is back (or their deadline)");
  for (uint64_t request : held) {
    Held& h = held_[request];
    if (other || h.resubmitted) {
      resubmit(request, other.value_or(index), "two batchers failed on this request", failover);
    } else {
      h.waiting = true;
    }
  }
}

}  // namespace seqpipe::gateway
