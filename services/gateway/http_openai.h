#pragma once
// OpenAI's completions API on the gateway (POST /v1/completions, POST /v1/chat/completions, GET
// /v1/models), so that OpenAI's own SDKs, and clients built on them, work unchanged. Each request
// becomes a protocol request; its replies become OpenAI's JSON, its streamed partials OpenAI's
// chunks. Pure functions, like http_json.h.
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "gateway/http_json.h"

namespace seqpipe::gateway {

// A completion ({"prompt": string or list of strings, ...}) or, with `chat`, a chat completion
// ({"messages": [...]}: the last user message is the input). OpenAI's options map onto the
// protocol's params (docs/PROTOCOL.md); an option the engine has no counterpart for is refused
// in OpenAI's error shape, naming it. `model` is the request's model with `route_model` (a gateway
// serving a model repository); else it is not checked: any name gets the served model (a client
// may well send its endpoint's URL there).
std::variant<HttpRequest, HttpAnswer> openai_request(std::string_view body,
                                                     const std::string& internal_id, bool chat,
                                                     int64_t now_s, bool route_model = false);
// The gateway's (final) reply as a completion or chat completion, with each choice's
// finish_reason and the request's usage, or an OpenAI error.
HttpAnswer openai_reply(const protocol::Reply& reply, const HttpRequest& request,
                        const std::string& model_name);
HttpAnswer openai_reply(std::string_view msgpack_reply, const HttpRequest& request,
                        const std::string& model_name);
// One reply of a streamed request as server-sent events: a partial is one chunk carrying its
// text; an ok final reply is a chunk with finish_reason, with stream_options.include_usage a
// chunk with no choices and the usage, then "data: [DONE]"; an error one is
// an event holding OpenAI's error object.
std::string openai_events(const protocol::Reply& reply, const HttpRequest& request,
                          const std::string& model_name);
std::string openai_events(std::string_view msgpack_reply, const HttpRequest& request,
                          const std::string& model_name);
// GET /v1/models: every model served (`names`); GET /v1/models/<name>: that model.
std::string openai_models(const std::vector<std::string>& names, int64_t created);
std::string openai_model(const std::string& model_name, int64_t created);
// {"error": {"message", "type", "param", "code"}} with `status`.
HttpAnswer openai_error(int status, const std::string& message, const std::string& param = "",
                        const std::string& code = "");

}  // namespace seqpipe::gateway
