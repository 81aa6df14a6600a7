#pragma once
// The gateway's batchers and what it does when one dies or restarts. One batcher
// (batcher.ingress_endpoint) unless gateway.batcher_endpoints lists several. The gateway and its
// batchers exchange heartbeats over the sockets they already have; a batcher's carry its
// incarnation, drawn at its start. The gateway keeps every request's texts, and this class knows
// which batcher holds each request, so that what a batcher held is submitted again, once:
//  - a batcher restarted (a new incarnation): its requests go to it again;
//  - a batcher silent for `heartbeat_liveness` intervals is dead: its requests go to another live
//    batcher (round-robin), or, with none live, wait for one to come back and go to it;
//  - a request lost a second time is answered `unavailable`; one that waits too long is answered
//    by its deadline.
// New requests go to the next live batcher; with one batcher, to it even while it is down (its
// tokenizers' sends wait for it, and so does the request). Socket-free; time is passed in. The
// gateway owns the requests.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/messages/clock.h"
#include "seqpipe/runtime/outbox.h"

namespace seqpipe::gateway {

class BatcherFailover {
 public:
  // `results_endpoint`: where the batchers answer this gateway's heartbeats.
  BatcherFailover(const config::PipelineConfig& config, std::string results_endpoint);

  bool several() const { return batchers_.size() > 1; }
  size_t live() const;
  // Every batcher's ingress (cancels go to all: a re-submitted request may have work at two).
  std::vector<std::string> endpoints() const;

  // The batcher for new request `request` (the next live one); false when none of several is
  // live.
  bool assign(uint64_t request);
  // The ingress of the batcher holding `request`, for its items: empty with one batcher (the
  // tokenizers send to the configured one).
  std::string target(uint64_t request) const;
  // `request` was answered.
  void forget(uint64_t request);

  // What is to be done with the requests of a batcher that died or restarted: `moved` ones now
  // belong to a live batcher (the gateway submits their texts again, in this order), `lost` ones
  // are to be answered `unavailable` with the message given.
  struct Failover {
    size_t dead = 0;  // batchers declared dead now
    std::vector<uint64_t> moved;
    std::vector<std::pair<uint64_t, std::string>> lost;
  };
  // A heartbeat from the batcher whose ingress is `from`, with its incarnation: it is live
  // (again). A new incarnation, or a return with requests waiting for a batcher, moves them.
  Failover heard(const std::string& from, uint64_t incarnation, SteadyClock::time_point now);
  // Heartbeats to every batcher when due (pushes), and failover for the batchers silent too long.
  Failover tick(SteadyClock::time_point now, Outbox& out);

 private:
  struct Link {
    std::string endpoint;  // its ingress
    SteadyClock::time_point last_seen{};
    bool live = true;
    uint64_t incarnation = 0;  // 0: not heard yet
  };
  struct Held {
    size_t batcher = 0;
    bool resubmitted = false;
    bool waiting = false;  // its batcher died with none live: it waits for one to come back
  };
  std::optional<size_t> next_live(size_t after) const;
  void dead(size_t index, Failover& failover);
  // Request `request` goes to batcher `to` again, once; the second time it is lost with `why`.
  void resubmit(uint64_t request, size_t to, const std::string& why, Failover& failover);

  std::vector<Link> batchers_;
  std::string results_endpoint_;
  std::chrono::milliseconds interval_;
  SteadyClock::duration timeout_;
  size_t last_ = 0;
  SteadyClock::time_point next_heartbeat_{};
  std::unordered_map<uint64_t, Held> held_;  // who holds each request in flight
};

}  // namespace seqpipe::gateway
