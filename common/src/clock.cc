#include "seqpipe/common/clock.h"

namespace seqpipe {

Now Now::read() {
  const auto wall = std::chrono::system_clock::now().time_since_epoch();
  return {SteadyClock::now(), std::chrono::duration_cast<std::chrono::microseconds>(wall).count()};
}

}  // namespace seqpipe
