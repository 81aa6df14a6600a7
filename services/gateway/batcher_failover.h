#pragma once
// The gateway's batchers and failover between them. One batcher (batcher.ingress_endpoint) unless
// gateway.batcher_endpoints lists several; only then does any of this run: each request is given
// to the next live batcher (round-robin), the gateway and its batchers exchange heartbeats over
// the sockets they already have, and the requests of a batcher silent for `heartbeat_liveness`
// intervals go once to another live batcher (a second loss, or none live: `unavailable`).
// Socket-free; time is passed in. The gateway owns the requests: this class knows only which
// batcher holds each one.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "seqpipe/common/clock.h"
#include "seqpipe/common/config.h"
#include "seqpipe/common/outbox.h"

namespace seqpipe::gateway {

class BatcherFailover {
 public:
  // `results_endpoint`: where the batchers answer this gateway's heartbeats.
  BatcherFailover(const config::PipelineConfig& config, std::string results_endpoint);

  bool several() const { return batchers_.size() > 1; }
  size_t live() const;
  // Every batcher's ingress (cancels go to all: a re-submitted request may have work at two).
  std::vector<std::string> endpoints() const;

  // The batcher for new request `request` (the next live one); false when none is live.
  bool assign(uint64_t request);
  // The ingress of the batcher holding `request`, for its items: empty with one batcher (the
  // tokenizers send to the configured one).
  std::string target(uint64_t request) const;
  // `request` was answered.
  void forget(uint64_t request);

  // A heartbeat from the batcher whose ingress is `from`: it is live (again).
  void heard(const std::string& from, SteadyClock::time_point now);
  // Heartbeats to every batcher when due (pushes), and failover for the batchers silent too long:
  // `moved` requests now belong to another live batcher (the gateway submits their texts again),
  // `lost` ones are to be answered `unavailable` with the message given.
  struct Failover {
    size_t dead = 0;  // batchers declared dead now
    std::vector<uint64_t> moved;
    std::vector<std::pair<uint64_t, std::string>> lost;
  };
  Failover tick(SteadyClock::time_point now, Outbox& out);

 private:
  struct Link {
    std::string endpoint;  // its ingress
    SteadyClock::time_point last_seen{};
    bool live = true;
  };
  struct Held {
    size_t batcher = 0;
    bool resubmitted = false;
  };
  std::optional<size_t> next_live(size_t after) const;
  void dead(size_t index, Failover& failover);

  std::vector<Link> batchers_;
  std::string results_endpoint_;
  std::chrono::milliseconds interval_;
  SteadyClock::duration timeout_;
  size_t last_ = 0;
  SteadyClock::time_point next_heartbeat_{};
  std::unordered_map<uint64_t, Held> held_;  // with several batchers: who holds each request
};

}  // namespace seqpipe::gateway
