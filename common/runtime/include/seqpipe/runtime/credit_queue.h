#pragma once
// Credit-based dispatch, as the ZeroMQ guide's load-balancing broker: a worker announces how
// much work it can hold (its credits: 1 batch for an encoder, its free KV-cache slots for a
// decoder); the hub sends work only to a worker with enough credit, and a worker's credit
// comes back with its result. A slow worker runs out of credit and stops receiving work while
// the others take it, so no queue builds behind it. No sockets here: the hub's loop calls it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace seqpipe::common {

class CreditQueue {
 public:
  // A worker's announced capacity (a (re)connecting worker announces its full capacity; work
  // sent to it before is considered lost, as the worker says by announcing).
  void announce(std::string_view worker, int capacity);
  // Credit returned with a finished piece of work (never above the announced capacity).
  void release(std::string_view worker, int credits);
  // The worker to send work costing `cost` credits to: the one with the most free credit
  // (ties: the one that has waited longest since it last got work); its credit drops by `cost`.
  // nullopt when no worker has `cost` free credits.
  std::optional<std::string> take(int cost = 1);
  // A dead worker leaves; its in-flight work is the caller's to re-dispatch.
  bool remove(std::string_view worker);

  int free_credits(std::string_view worker) const;  // -1 for an unknown worker
  int total_free() const;
  int total_capacity() const;
  int largest_free() const;  // the most any single worker can take now
  size_t size() const { return workers_.size(); }

 private:
  struct Worker {
    std::string id;  // ZeroMQ routing id: bytes, not a C string
    int capacity = 0;
    int free = 0;
    uint64_t last_taken = 0;
  };
  Worker* find(std::string_view id);
  const Worker* find(std::string_view id) const;

  std::vector<Worker> workers_;  // a handful per hub: a linear scan beats a map
  uint64_t clock_ = 0;
};

}  // namespace seqpipe::common
