#pragma once
// What every JSON front end shares (http_json.cc, http_openai.cc, http_tgi.cc, kserve_grpc.cc):
// reading a body and handing a request's fields to the gateway's validator (json_request.h).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "gateway/http_json.h"
#include "seqpipe/protocol/generate_options.h"

namespace seqpipe::gateway {

// The JSON object in `body`, or nullopt (also when it is nested deeper than any request).
std::optional<nlohmann::json> parse_object(std::string_view body);
// When `body` is not valid UTF-8 (JSON's encoding): "the body is not valid UTF-8 (byte N)", the
// answer a door gives instead of its "must be a JSON object" for a body parse_object refused.
std::optional<std::string> not_utf8(std::string_view body);

// `request` (a msgpack request's fields as JSON) as the gateway's request, its id replaced by
// `internal_id`.
HttpRequest to_gateway(nlohmann::json request, const std::string& internal_id,
                       std::string client_id);

// The generation options a front door names in `body`, found by the option table's `column` (its
// names for them), as `params` under the protocol's names; null values are left out and a string
// given for a list option is a list of one. The codec checks the values.
nlohmann::json params_by_front_name(const nlohmann::json& body,
                                    protocol::FrontName protocol::GenerateOption::*column);

// The KServe v2 tensor mapping, the one both KServe doors use (HTTP's JSON body, gRPC's
// messages as that JSON). An inference request object as the gateway's request, or why it is
// not one (an invalid_argument message). `stream` (gRPC's ModelStreamInfer): a request of one
// text is sent as a streamed one (`text`, `stream`: partial replies, then the final one); one of
// several texts is not (one final reply).
std::variant<HttpRequest, std::string> kserve_infer_json(const nlohmann::json& infer,
                                                         const std::string& internal_id,
                                                         bool stream = false);

}  // namespace seqpipe::gateway
