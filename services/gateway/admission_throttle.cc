#include "gateway/admission_throttle.h"

#include <algorithm>

namespace seqpipe::gateway {

AdmissionThrottle::Counts& AdmissionThrottle::counts(const std::string& model,
                                                     SteadyClock::time_point now) {
  Counts& c = models_[model];
  while (now - c.since >= kHalfLife) {  // at most a few rounds: then it starts afresh
    if (c.requests < 1) {
      c = Counts{0, 0, now};
      break;
    }
    c.requests /= 2;
    c.accepts /= 2;
    c.since += kHalfLife;
  }
  return c;
}

bool AdmissionThrottle::refuse(const std::string& model, SteadyClock::time_point now) {
  Counts& c = counts(model, now);
  const double p = std::max(0.0, (c.requests - kAcceptsMultiplier * c.accepts) / (c.requests + 1));
  c.requests += 1;
  if (p > 0 && std::uniform_real_distribution<double>(0, 1)(random_) < p) return true;
  c.accepts += 1;
  return false;
}

void AdmissionThrottle::refused_downstream(const std::string& model, SteadyClock::time_point now) {
  Counts& c = counts(model, now);
  c.accepts = std::max(0.0, c.accepts - 1);
}

double AdmissionThrottle::accepted_share(const std::string& model) const {
  const auto it = models_.find(model);
  if (it == models_.end() || it->second.requests < 1) return 1;
  return it->second.accepts / it->second.requests;
}

}  // namespace seqpipe::gateway
