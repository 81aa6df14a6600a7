// Now and Deadline (seqpipe/messages/clock.h): the one deadline type every stage checks, and its
// mapping onto a process's steady clock.
#include "seqpipe/messages/clock.h"

#include <gtest/gtest.h>

#include <limits>

namespace seqpipe {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

const Now t0{SteadyClock::time_point{} + std::chrono::hours(1), 1'700'000'000'000'000};

TEST(Now, StepsBothClocksTogether) {
  const Now later = t0 + milliseconds(250);
  EXPECT_EQ(later.steady - t0.steady, milliseconds(250));
  EXPECT_EQ(later.unix_us - t0.unix_us, 250'000);
  const Now read = Now::read();
  EXPECT_GT(read.unix_us, t0.unix_us);  // after 2023
}

TEST(Deadline, ExpiresExactlyAtItsInstant) {
  const Deadline d = Deadline::after(t0, milliseconds(250));
  EXPECT_EQ(d.unix_us(), t0.unix_us + 250'000);
  EXPECT_FALSE(d.none());
  EXPECT_FALSE(d.expired(t0));
  EXPECT_FALSE(d.expired(t0 + microseconds(249'999)));
  EXPECT_TRUE(d.expired(t0 + milliseconds(250)));
  EXPECT_EQ(d, Deadline::at_unix_us(t0.unix_us + 250'000));
  EXPECT_LT(d, Deadline::after(t0, milliseconds(251)));
}

TEST(Deadline, NoneNeverExpires) {
  const Deadline none;
  EXPECT_TRUE(none.none());
  EXPECT_EQ(none, Deadline::at_unix_us(0));  // the wire's 0
  EXPECT_FALSE(none.expired(t0 + std::chrono::hours(24 * 365)));
  EXPECT_EQ(none.on_steady_clock(t0), SteadyClock::time_point::max());
}

TEST(Deadline, APeersFarOffDeadlineMapsWithoutOverflow) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  const int64_t min = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(Deadline::at_unix_us(max).on_steady_clock(t0), SteadyClock::time_point::max());
  EXPECT_LT(Deadline::at_unix_us(min).on_steady_clock(t0), t0.steady);
  EXPECT_TRUE(Deadline::at_unix_us(min).expired(t0));
  EXPECT_FALSE(Deadline::at_unix_us(max).expired(t0));
}

TEST(Deadline, MapsOntoTheSteadyClockOfTheMomentGiven) {
  const Deadline d = Deadline::after(t0, milliseconds(300));
  // Read 100 ms later by another process whose steady clock has another origin.
  const Now elsewhere{SteadyClock::time_point{} + std::chrono::hours(7), t0.unix_us + 100'000};
  EXPECT_EQ(d.on_steady_clock(elsewhere), elsewhere.steady + milliseconds(200));
  // Already past: a steady time in the past, so a queue drops it at once.
  const Now late = elsewhere + milliseconds(400);
  EXPECT_LT(d.on_steady_clock(late), late.steady);
  EXPECT_TRUE(d.expired(late));
}

}  // namespace
}  // namespace seqpipe

namespace seqpipe {
namespace {

TEST(TimeSource, ManualTimeMovesOnlyWhenTold) {
  ManualTime time(t0);
  EXPECT_EQ(time.now(), t0);
  EXPECT_EQ(time.now(), t0);
  time.advance(milliseconds(5));
  EXPECT_EQ(time.now(), t0 + milliseconds(5));
  const TimeSource& source = time;
  EXPECT_TRUE(Deadline::after(t0, milliseconds(5)).expired(source.now()));
}

TEST(TimeSource, SystemTimeReadsBothRealClocks) {
  const Now a = system_time().now();
  const Now b = system_time().now();
  EXPECT_LE(a.steady, b.steady);
  EXPECT_GT(a.unix_us, t0.unix_us);
}

}  // namespace
}  // namespace seqpipe
