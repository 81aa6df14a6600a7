#include "seqpipe/runtime/credit_queue.h"

#include <algorithm>

namespace seqpipe::common {

CreditQueue::Worker* CreditQueue::find(std::string_view id) {
  for (Worker& w : workers_) {
    if (w.id == id) return &w;
  }
  return nullptr;
}

const CreditQueue::Worker* CreditQueue::find(std::string_view id) const {
  for (const Worker& w : workers_) {
    if (w.id == id) return &w;
  }
  return nullptr;
}

void CreditQueue::announce(std::string_view worker, int capacity) {
  capacity = std::max(capacity, 0);
  if (Worker* w = find(worker)) {
    w->capacity = capacity;
    w->free = capacity;
    return;
  }
  workers_.push_back({std::string(worker), capacity, capacity, 0});
}

void CreditQueue::release(std::string_view worker, int credits) {
  if (Worker* w = find(worker)) w->free = std::min(w->capacity, w->free + std::max(credits, 0));
}

std::optional<std::string> CreditQueue::take(int cost) {
  Worker* best = nullptr;
  for (Worker& w : workers_) {
    if (w.free < cost) continue;
    if (best == nullptr || w.free > best->free ||
        (w.free == best->free && w.last_taken < best->last_taken))
      best = &w;
  }
  if (best == nullptr) return std::nullopt;
  best->free -= cost;
  best->last_taken = ++clock_;
  return best->id;
}

bool CreditQueue::remove(std::string_view worker) {
  auto it = std::find_if(workers_.begin(), workers_.end(),
                         [&](const Worker& w) { return w.id == worker; });
  if (it == workers_.end()) return false;
  workers_.erase(it);
  return true;
}

int CreditQueue::free_credits(std::string_view worker) const {
  const Worker* w = find(worker);
  return w ? w->free : -1;
}

int CreditQueue::total_free() const {
  int total = 0;
  for (const Worker& w : workers_) total += w.free;
  return total;
}

int CreditQueue::total_capacity() const {
  int total = 0;
  for (const Worker& w : workers_) total += w.capacity;
  return total;
}

int CreditQueue::largest_free() const {
  int best = 0;
  for (const Worker& w : workers_) best = std::max(best, w.free);
  return best;
}

}  // namespace seqpipe::common
