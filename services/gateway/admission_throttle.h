#pragma once
// Refusing at the gateway what the batcher would refuse, before it costs a tokenizer and the
// trip there: the adaptive throttling of Google's SRE book ("Handling Overload"). Per model
// version it counts the requests of the last seconds and those the pipeline took (not answered
// `overloaded` by the batcher); a new request is refused here at once with probability
// max(0, (requests - K x accepts) / (requests + 1)). While the batcher takes everything the
// probability is 0; at twice what it takes, about half of the requests are refused here, in
// microseconds, and the pipeline's CPU goes to the requests it serves. Socket-free and
// clock-free (time passed in), a seeded generator: tested deterministically.
#include <chrono>
#include <map>
#include <random>
#include <string>

#include "seqpipe/messages/clock.h"

namespace seqpipe::gateway {

class AdmissionThrottle {
 public:
  // K: refusing starts once the requests exceed K x those taken (the SRE book suggests 2; 1.1
  // sheds sooner, leaving the batcher 10% more than it takes, to learn when load falls).
  static constexpr double kAcceptsMultiplier = 1.1;
  // The counts halve every this long: they describe the last few seconds.
  static constexpr std::chrono::seconds kHalfLife{1};

  // A new request for `model`: true when it is to be refused here (counted as a request that was
  // not taken); false when it goes on (counted as taken until refused_downstream says not).
  bool refuse(const std::string& model, SteadyClock::time_point now);
  // The batcher answered a request for `model` `overloaded`: it was not taken after all.
  void refused_downstream(const std::string& model, SteadyClock::time_point now);
  // The share of `model`'s recent requests the pipeline took (1 with none), for the answer.
  double accepted_share(const std::string& model) const;

 private:
  struct Counts {
    double requests = 0, accepts = 0;
    SteadyClock::time_point since{};
  };
  Counts& counts(const std::string& model, SteadyClock::time_point now);
  std::map<std::string, Counts> models_;
  std::minstd_rand random_{42};
};

}  // namespace seqpipe::gateway
