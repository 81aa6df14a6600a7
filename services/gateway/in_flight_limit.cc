#include "gateway/in_flight_limit.h"

namespace seqpipe::gateway {

namespace {
// Recent gaps weigh 1/8, as the batcher's ServiceEstimate: a change of speed shows within a few
// dozen answers, one slow batch does not swing it.
constexpr double kWeight = 0.125;
}  // namespace

InFlightLimit::Verdict InFlightLimit::take(const std::string& model, size_t sequences,
                                           SteadyClock::time_point now,
                                           SteadyClock::time_point deadline) {
  Lane& l = lanes_[model];
  if (l.in_flight + sequences > limit_) return Verdict::kFull;
  if (l.in_flight >= busy_ && l.pace) {
    const auto ahead = static_cast<SteadyClock::duration::rep>(l.in_flight + sequences);
    if (now + planned_pace(l) * ahead > deadline) return Verdict::kTooLate;
  }
  l.in_flight += sequences;
  return Verdict::kAdmit;
}

void InFlightLimit::give_back(const std::string& model, size_t sequences) {
  auto it = lanes_.find(model);
  if (it == lanes_.end()) return;
  it->second.in_flight -= std::min(it->second.in_flight, sequences);
}

void InFlightLimit::answered(const std::string& model, size_t sequences,
                             SteadyClock::time_point now) {
  if (sequences == 0) return;
  Lane& l = lanes_[model];
  if (l.paced_since) {
    const auto n = static_cast<SteadyClock::duration::rep>(sequences);
    const SteadyClock::duration gap = (now - *l.paced_since) / n;
    if (l.pace) {
      // The deviation against the mean before this gap moves it, as TCP's round-trip variance.
      const SteadyClock::duration deviation = gap > *l.pace ? gap - *l.pace : *l.pace - gap;
      l.spread = std::chrono::duration_cast<SteadyClock::duration>(
          l.spread + (deviation - l.spread) * kWeight);
      l.pace =
          std::chrono::duration_cast<SteadyClock::duration>(*l.pace + (gap - *l.pace) * kWeight);
    } else {
      l.pace = gap;
    }
  }
  // The next gap is the pipeline's only while enough is in flight to keep it busy.
  l.paced_since = l.in_flight >= busy_ ? std::optional(now) : std::nullopt;
}

size_t InFlightLimit::in_flight(const std::string& model) const {
  auto it = lanes_.find(model);
  return it == lanes_.end() ? 0 : it->second.in_flight;
}

SteadyClock::duration InFlightLimit::planned_pace(const Lane& lane) {
  return lane.pace.value_or(SteadyClock::duration{}) +
         std::chrono::duration_cast<SteadyClock::duration>(lane.spread * kPaceSpreads);
}

std::optional<SteadyClock::duration> InFlightLimit::wait(const std::string& model) const {
  auto it = lanes_.find(model);
  if (it == lanes_.end() || !it->second.pace) return std::nullopt;
  return planned_pace(it->second) *
         static_cast<SteadyClock::duration::rep>(it->second.in_flight + 1);
}

}  // namespace seqpipe::gateway
