#pragma once
// What every JSON front end shares (http_json.cc, http_openai.cc, http_tgi.cc): reading a body and
// handing a request to the gateway as msgpack.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/http_json.h"

namespace seqpipe::gateway {

// The JSON object in `body`, or nullopt (also when it is nested deeper than any request).
std::optional<nlohmann::json> parse_object(std::string_view body);

// `request` (a msgpack request's fields as JSON) as the gateway's msgpack request, its id
// replaced by `internal_id`.
HttpRequest to_gateway(nlohmann::json request, const std::string& internal_id,
                       std::string client_id);

// The reply's HTTP status: 200, or its error code's.
int status_of(const nlohmann::json& reply);

// An ok reply's usage, one per text (none when it carries none); a finish reason this gateway
// does not know reads as kStop, as protocol::decode_reply reads it.
std::vector<protocol::Usage> usage_of(const nlohmann::json& reply);

}  // namespace seqpipe::gateway
