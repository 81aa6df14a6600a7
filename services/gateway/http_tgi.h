#pragma once
// Hugging Face text-generation-inference's API on the gateway (POST /generate, POST
// /generate_stream, GET /info; GET /health is the readiness probe), so that TGI's clients work
// unchanged. Each request becomes a protocol request; its replies become TGI's JSON and its
// streamed partials TGI's token events. Pure functions, like http_json.h.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "gateway/http_json.h"

namespace seqpipe::gateway {

// {"inputs": string, "parameters": {...}}: TGI's parameter names map onto the protocol's params
// (docs/PROTOCOL.md); one the engine has no counterpart for is refused with 422, naming it.
// `stream`: /generate_stream.
std::variant<HttpRequest, HttpAnswer> tgi_request(std::string_view body,
                                                  const std::string& internal_id, bool stream);
// The gateway's reply as {"generated_text": ...}, with "details" (finish_reason,
// generated_tokens) when the request asked for them, or TGI's error.
HttpAnswer tgi_reply(const protocol::Reply& reply, const HttpRequest& request);
HttpAnswer tgi_reply(std::string_view msgpack_reply, const HttpRequest& request);
// One reply of /generate_stream as a server-sent event: a partial is a token event whose token
// text is the partial's text; the final reply is an event with an empty special token,
// "generated_text" and, when the request asked for them, "details"; an error is {"error",
// "error_type"}. `index`: the event's place in the stream.
std::string tgi_event(const protocol::Reply& reply, uint32_t index, const HttpRequest& request);
std::string tgi_event(std::string_view msgpack_reply, uint32_t index, const HttpRequest& request);
// GET /info.
std::string tgi_info(const std::string& model_name);
// {"error": message, "error_type": type} with `status`.
HttpAnswer tgi_error(int status, const std::string& message, const std::string& type);

}  // namespace seqpipe::gateway
