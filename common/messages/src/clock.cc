#include "seqpipe/messages/clock.h"

namespace seqpipe {

Now Now::read() {
  const auto wall = std::chrono::system_clock::now().time_since_epoch();
  return {SteadyClock::now(), std::chrono::duration_cast<std::chrono::microseconds>(wall).count()};
}

const TimeSource& system_time() {
  struct System final : TimeSource {
    Now now() const override { return Now::read(); }
  };
  static const System system;
  return system;
}

}  // namespace seqpipe
