#pragma once
// What every service main shares: SIGINT/SIGTERM only set a flag (the loops poll with a timeout
// and look at it), and the wall clock the work items' deadlines use.
#include <chrono>
#include <cstdint>
#include <string_view>

namespace seqpipe::service {

// Logs go to stderr (journald and `seqpipe up` collect them) as
// "[time] [seqpipe-<service> pid] [level] message". Call once at the top of main.
void init_logging(std::string_view service);

// Installs the handlers; call once at the top of main.
void install_stop_handlers();
bool stop_requested();
void request_stop();  // for tests and for fatal conditions found by the loop itself

// Microseconds since the Unix epoch (comparable across processes and machines).
inline int64_t unix_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace seqpipe::service
