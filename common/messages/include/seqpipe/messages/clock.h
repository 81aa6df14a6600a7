#pragma once
// Time as the pipeline reads it, and the one deadline type. Steady time measures intervals inside
// a process (heartbeats, stage timings, a hub's timers); wall time, in microseconds since the Unix
// epoch, is what a deadline is written in when it crosses processes and machines. `Now` is both
// read at one moment. The hubs are handed one with every call and the worker stages read a
// TimeSource given at construction, so tests drive both with made-up moments; only the services'
// loops read the real clocks.
#include <algorithm>
#include <chrono>
#include <cstdint>

namespace seqpipe {

using SteadyClock = std::chrono::steady_clock;

// A moment as both clocks read it.
struct Now {
  SteadyClock::time_point steady;
  int64_t unix_us = 0;

  // Both clocks, now.
  static Now read();
  // The moment `d` later on both clocks (tests step through time with it).
  Now operator+(SteadyClock::duration d) const {
    return {steady + d, unix_us + std::chrono::duration_cast<std::chrono::microseconds>(d).count()};
  }
  bool operator==(const Now&) const = default;
};

// Where code that is not handed the time reads it (the worker stages; LevelDB's Env::NowMicros):
// the system's clocks in a service, a ManualTime in tests, given at construction.
class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual Now now() const = 0;
};
// Now::read(), for everyone.
const TimeSource& system_time();

// A time source that moves only when told to.
class ManualTime final : public TimeSource {
 public:
  explicit ManualTime(Now start) : now_(start) {}
  Now now() const override { return now_; }
  void advance(SteadyClock::duration d) { now_ = now_ + d; }

 private:
  Now now_;
};

// When a request's work stops mattering: an instant on the wall clock, so every process compares
// it with its own clock. The gateway sets it from the client's timeout_ms (or its default); every
// stage drops an expired item before computing on it. A default Deadline is none: it never
// expires (the wire writes it as 0).
class Deadline {
 public:
  Deadline() = default;
  // 0: none.
  static Deadline at_unix_us(int64_t unix_us) { return Deadline(unix_us); }
  static Deadline after(const Now& now, std::chrono::milliseconds timeout) {
    return Deadline(now.unix_us +
                    std::chrono::duration_cast<std::chrono::microseconds>(timeout).count());
  }

  bool none() const { return unix_us_ == 0; }
  int64_t unix_us() const { return unix_us_; }  // 0: none
  bool expired(const Now& now) const { return !none() && now.unix_us >= unix_us_; }
  // The same instant on this process's steady clock, for the timers that run on it (the
  // batcher's queue deadlines). None: the steady clock's end of time.
  // Saturating: a deadline a peer wrote decades away (or before the epoch) stays far away.
  SteadyClock::time_point on_steady_clock(const Now& now) const {
    constexpr int64_t kFar = int64_t{1} << 50;  // microseconds: 35 years
    if (none()) return SteadyClock::time_point::max();
    int64_t left = 0;
    if (__builtin_sub_overflow(unix_us_, now.unix_us, &left)) left = unix_us_ < 0 ? -kFar : kFar;
    if (left >= kFar) return SteadyClock::time_point::max();
    return now.steady + std::chrono::microseconds(std::max(left, -kFar));
  }

  auto operator<=>(const Deadline&) const = default;

 private:
  explicit Deadline(int64_t unix_us) : unix_us_(unix_us) {}
  int64_t unix_us_ = 0;
};

}  // namespace seqpipe
