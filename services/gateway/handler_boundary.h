#pragma once
// The one boundary between a client's bytes and the gateway process, for every front door's
// handlers (HTTP's request and reply callbacks, gRPC's calls, streams and replies): whatever a
// handler throws becomes an internal-error answer to that one request, a log line naming the
// handler and a count in seqpipe_gateway_handler_exceptions_total, never an abort of the gateway.
// Input is validated before this: an exception caught here is a bug, not an answer to bad input.
#include <spdlog/spdlog.h>

#include <exception>
#include <string_view>

#include "seqpipe/observability/metrics.h"

namespace seqpipe::gateway {

using Door = metrics::FrontDoorMetrics::Door;

// Runs `handler`; when it throws, counts it (`metrics` may be null: tests), logs `what` and runs
// `answer_internal` (which answers the request; an exception from it is logged and dropped too).
template <class Handler, class AnswerInternal>
void guard_handler(metrics::FrontDoorMetrics* metrics, Door door, std::string_view what,
                   Handler&& handler, AnswerInternal&& answer_internal) noexcept {
  try {
    handler();
    return;
  } catch (const std::exception& e) {
    spdlog::error("{}: {} threw: {}", door == Door::kHttp ? "http" : "grpc", what, e.what());
  } catch (...) {
    spdlog::error("{}: {} threw a non-standard exception", door == Door::kHttp ? "http" : "grpc",
                  what);
  }
  if (metrics != nullptr) metrics->handler_exception(door);
  try {
    answer_internal();
  } catch (...) {
    spdlog::error("the internal-error answer to {} threw too; the request goes unanswered", what);
  }
}

}  // namespace seqpipe::gateway
