#pragma once
// The gateway's bound on the sequences it has in the pipeline, per model version: at most
// batcher.max_queue_size, the most a batcher queues. A request that would go beyond it is refused
// here at once, before a tokenizer and the trip to the batcher: the batcher would refuse it
// there (`the batcher's queue is full`), after it waited in this gateway's queue for a tokenizer
// credit (tens to hundreds of ms under overload). Everything in flight counts, waiting here
// included, so the gateway's own queue is bounded by it too. Socket-free and clock-free.
#include <algorithm>
#include <cstddef>
#include <map>
#include <string>

namespace seqpipe::gateway {

class InFlightLimit {
 public:
  explicit InFlightLimit(size_t limit) : limit_(limit) {}

  // Whether `sequences` more of `model` may go in: true (and counted) when the model's sequences
  // in flight stay within the limit.
  bool take(const std::string& model, size_t sequences) {
    size_t& n = in_flight_[model];
    if (n + sequences > limit_) return false;
    n += sequences;
    return true;
  }
  // `sequences` of `model` taken before were answered (ok, error or deadline).
  void give_back(const std::string& model, size_t sequences) {
    auto it = in_flight_.find(model);
    if (it == in_flight_.end()) return;
    it->second -= std::min(it->second, sequences);
    if (it->second == 0) in_flight_.erase(it);
  }
  size_t in_flight(const std::string& model) const {
    auto it = in_flight_.find(model);
    return it == in_flight_.end() ? 0 : it->second;
  }
  size_t limit() const { return limit_; }

 private:
  size_t limit_;
  std::map<std::string, size_t> in_flight_;
};

}  // namespace seqpipe::gateway
