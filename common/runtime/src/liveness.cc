#include "seqpipe/runtime/liveness.h"

#include <algorithm>

namespace seqpipe::common {

HubLiveness::HubLiveness(std::chrono::milliseconds interval, int liveness)
    : interval_(interval), timeout_(interval * liveness) {}

void HubLiveness::seen(std::string_view worker, SteadyClock::time_point now) {
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (ids_[i] == worker) {
      last_seen_[i] = now;
      return;
    }
  }
  ids_.emplace_back(worker);
  last_seen_.push_back(now);
}

void HubLiveness::forget(std::string_view worker) {
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (ids_[i] == worker) {
      ids_.erase(ids_.begin() + static_cast<std::ptrdiff_t>(i));
      last_seen_.erase(last_seen_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

std::vector<std::string> HubLiveness::take_dead(SteadyClock::time_point now) {
  std::vector<std::string> dead;
  for (size_t i = 0; i < ids_.size();) {
    if (now - last_seen_[i] > timeout_) {
      dead.push_back(std::move(ids_[i]));
      ids_.erase(ids_.begin() + static_cast<std::ptrdiff_t>(i));
      last_seen_.erase(last_seen_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return dead;
}

bool HubLiveness::heartbeat_due(SteadyClock::time_point now) {
  if (now < next_heartbeat_) return false;
  next_heartbeat_ = now + interval_;
  return true;
}

int HubLiveness::silent(SteadyClock::time_point now) const {
  return static_cast<int>(
      std::count_if(last_seen_.begin(), last_seen_.end(),
                    [&](SteadyClock::time_point seen) { return now - seen > interval_; }));
}

PeerLiveness::PeerLiveness(std::chrono::milliseconds interval, int liveness,
                           std::chrono::milliseconds reconnect_max, SteadyClock::time_point now)
    : interval_(interval),
      reconnect_max_(reconnect_max),
      pause_(interval),
      timeout_(interval * liveness),
      last_seen_(now),
      next_heartbeat_(now) {}

void PeerLiveness::seen(SteadyClock::time_point now) {
  last_seen_ = now;
  pause_ = interval_;
}

bool PeerLiveness::heartbeat_due(SteadyClock::time_point now) {
  if (now < next_heartbeat_) return false;
  next_heartbeat_ = now + interval_;
  return true;
}

std::chrono::milliseconds PeerLiveness::reconnect_pause() {
  const auto pause = pause_;
  pause_ = std::min(pause_ * 2, reconnect_max_);
  return pause;
}

std::chrono::milliseconds PeerLiveness::until_heartbeat(SteadyClock::time_point now) const {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::ceil<std::chrono::milliseconds>(next_heartbeat_ - now));
}

}  // namespace seqpipe::common
