#pragma once
// The gateway's admission of a model version's sequences into the pipeline, decided at once
// before a tokenizer (refusals after the trip to the batcher waited in this gateway's queue for a
// tokenizer credit: tens to hundreds of ms under overload). Two bounds:
//  - in flight: at most batcher.max_queue_size sequences, the most a batcher queues (it would
//    refuse the next, `the batcher's queue is full`). Everything in flight counts, waiting here
//    included, so the gateway's own queue is bounded too;
//  - by deadline: the pipeline's pace (time per answered sequence, an EWMA of the gaps between
//    answers measured while at least `busy` sequences were in flight, so the pipeline, not the
//    arrivals, set it) with an allowance for its spread (kPaceSpreads mean deviations of the
//    gaps from it, so a pace slower than its mean for a while still answers in time) times the
//    sequences in flight says when a new one would be answered; one whose deadline comes first
//    is refused. Never while fewer than `busy` are in flight (light load, or a burst on an idle
//    pipeline: then nothing is refused on an estimate).
// Socket-free and clock-free (time passed in): tested with an injected clock.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "seqpipe/messages/clock.h"

namespace seqpipe::gateway {

// How many mean deviations of the answers' gaps the deadline check adds to their mean pace.
// With the mean alone, 9% of the requests admitted at a 1 s deadline under 2x overload still
// missed it (docs/PERFORMANCE.md, "Overload (goodput)").
inline constexpr double kPaceSpreads = 2.0;

class InFlightLimit {
 public:
  enum class Verdict { kAdmit, kFull, kTooLate };
  // `limit`: batcher.max_queue_size; `busy`: sequences in flight from which the answers' pace is
  // the pipeline's (2 x batcher.max_batch_size: a batch computing and one waiting).
  InFlightLimit(size_t limit, size_t busy) : limit_(limit), busy_(busy) {}

  // Whether `sequences` more of `model`, due by `deadline`, may go in at `now`; counted when
  // kAdmit.
  Verdict take(const std::string& model, size_t sequences, SteadyClock::time_point now,
               SteadyClock::time_point deadline);
  // `sequences` of `model` taken before were answered (ok, error or deadline).
  void give_back(const std::string& model, size_t sequences);
  // The pipeline answered `sequences` of `model` at `now` (ok or an error of its own): a pace
  // sample when the gap before it was a busy one.
  void answered(const std::string& model, size_t sequences, SteadyClock::time_point now);

  size_t in_flight(const std::string& model) const;
  // When a sequence of `model` taken now, behind those in flight, would be answered at the
  // latest (the pace with its spread allowance); nullopt with no pace measured yet.
  std::optional<SteadyClock::duration> wait(const std::string& model) const;
  size_t limit() const { return limit_; }

 private:
  struct Lane {
    size_t in_flight = 0;
    std::optional<SteadyClock::duration> pace;           // per answered sequence
    SteadyClock::duration spread{};                      // mean deviation of the gaps from pace
    std::optional<SteadyClock::time_point> paced_since;  // the last answer while busy
  };
  // The time per sequence the deadline check plans with: pace + kPaceSpreads x spread.
  static SteadyClock::duration planned_pace(const Lane& lane);
  size_t limit_, busy_;
  std::map<std::string, Lane> lanes_;
};

}  // namespace seqpipe::gateway
