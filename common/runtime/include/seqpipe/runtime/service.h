#pragma once
// What every service main shares: SIGINT/SIGTERM only set a flag (the loops poll with a timeout
// and look at it). The clocks are seqpipe/messages/clock.h's.
#include <string_view>

namespace seqpipe::service {

// Logs go to stderr (journald and `seqpipe up` collect them) as
// "[time] [seqpipe-<service> pid] [level] message". Call once at the top of main.
void init_logging(std::string_view service);

// Installs the handlers; call once at the top of main.
void install_stop_handlers();
bool stop_requested();
void request_stop();  // for tests and for fatal conditions found by the loop itself

}  // namespace seqpipe::service
