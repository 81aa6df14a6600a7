#pragma once
// A request's deadline over HTTP: the X-Request-Timeout header, read in this one place for every
// route of the HTTP front door (/v1/generate, KServe v2 infer, OpenAI's, TGI's), as Envoy's
// x-envoy-upstream-rq-timeout-ms: the clients of OpenAI's and TGI's APIs have no body field for
// a deadline. Pure functions: tested without sockets.
#include <cstdint>
#include <optional>
#include <variant>

#include "gateway/http_json.h"

namespace seqpipe::gateway {

inline constexpr const char* kRequestTimeoutHeader = "X-Request-Timeout";

// The header's milliseconds (`value`: the header's value, null when the request has none); a
// 400 answer naming the header when it is not a whole number. The range (1..
// gateway.max_timeout_ms) is the gateway's to check, answered in the route's own shape.
std::variant<std::optional<uint32_t>, HttpAnswer> request_timeout(const char* value);

// `request` with the deadline `timeout_ms` in place of any timeout_ms of its body (its fields, as
// every route builds them).
void set_timeout(HttpRequest& request, uint32_t timeout_ms);

}  // namespace seqpipe::gateway
