#include "gateway/http_openai.h"

#include <cmath>
#include <limits>

#include "gateway/json_body.h"

namespace seqpipe::gateway {

using nlohmann::json;

namespace {

// OpenAI's error types: a request the client must change, or a failure on the server's side.
std::string error_type(int status) {
  if (status == 429) return "rate_limit_error";
  return status < 500 ? "invalid_request_error" : "server_error";
}

HttpAnswer bad(const std::string& param, const std::string& message) {
  return openai_error(400, message, param, "invalid_argument");
}

// The input text of a chat: the last user message's content, a string or text parts joined.
std::variant<std::string, HttpAnswer> chat_input(const json& messages) {
  if (!messages.is_array() || messages.empty())
    return bad("messages", "messages must be a non-empty array");
  for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
    if (!it->is_object() || it->value("role", "") != "user") continue;
    const json& content = it->value("content", json());
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) return bad("messages", "a user message's content must be text");
    std::string text;
    for (const json& part : content) {
      if (!part.is_object() || part.value("type", "") != "text")
        return bad("messages", "only text content parts are supported");
      text += part.value("text", "");
    }
    return text;
  }
  return bad("messages", "messages hold no user message (its content is the input)");
}

// The prompt: {"text": ...} for a string (or a list of one), {"texts": [...]} for a list.
std::variant<json, HttpAnswer> prompt_input(const json& prompt) {
  if (prompt.is_string()) return json{{"text", prompt}};
  if (!prompt.is_array() || prompt.empty())
    return bad("prompt", "prompt must be a string or a non-empty list of strings");
  for (const json& p : prompt) {
    if (!p.is_string())
      return bad("prompt", "prompt must hold strings (token ids are not supported)");
  }
  if (prompt.size() == 1) return json{{"text", prompt[0]}};
  return json{{"texts", prompt}};
}

// OpenAI's documented types and ranges of the options read here (its API reference), checked
// before anything is mapped, in its words: null is every option's default.
struct TypedOption {
  const char* name;
  enum Kind { kNumber, kInteger, kBoolean, kString, kObject } kind;
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;  // lo itself is out of range
};
constexpr TypedOption kTypedOptions[] = {
    {"temperature", TypedOption::kNumber, 0, 2},
    {"top_p", TypedOption::kNumber, 0, 1, true},
    {"presence_penalty", TypedOption::kNumber, -2, 2},
    {"frequency_penalty", TypedOption::kNumber, -2, 2},
    {"seed", TypedOption::kInteger},
    {"max_tokens", TypedOption::kInteger, 1},
    {"max_completion_tokens", TypedOption::kInteger, 1},
    {"min_tokens", TypedOption::kInteger, 0},
    {"n", TypedOption::kInteger, 1, 128},
    {"best_of", TypedOption::kInteger, 0, 20},
    {"stream", TypedOption::kBoolean},
    {"echo", TypedOption::kBoolean},
    {"user", TypedOption::kString},
    {"stream_options", TypedOption::kObject},
};

std::string_view json_type_name(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a decimal";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// OpenAI's answer to a value of the wrong type or out of range: 400 naming the parameter, with
// its codes (invalid_type, decimal_below_min_value, integer_above_max_value, ...).
std::optional<HttpAnswer> refuse_mistyped(const json& body) {
  static constexpr const char* kExpected[] = {"a decimal", "an integer", "a boolean", "a string",
                                              "an object"};
  for (const TypedOption& o : kTypedOptions) {
    const auto it = body.find(o.name);
    if (it == body.end() || it->is_null()) continue;
    const json& v = *it;
    const bool fits = o.kind == TypedOption::kNumber    ? v.is_number()
                      : o.kind == TypedOption::kInteger ? v.is_number_integer()
                      : o.kind == TypedOption::kBoolean ? v.is_boolean()
                      : o.kind == TypedOption::kString  ? v.is_string()
                                                        : v.is_object();
    if (!fits) {
      return openai_error(400,
                          "Invalid type for '" + std::string(o.name) + "': expected " +
                              kExpected[o.kind] + ", but got " + std::string(json_type_name(v)) +
                              " instead.",
                          o.name, "invalid_type");
    }
    if (!v.is_number()) continue;
    const double x = v.get<double>();
    const bool low = o.lo_open ? x <= o.lo : x<o.lo, high = x> o.hi;
    if (!low && !high) continue;
    const std::string kind = o.kind == TypedOption::kInteger ? "integer" : "decimal";
    const double edge = low ? o.lo : o.hi;  // written as OpenAI does: 0, not 0.0
    const json bound = edge == std::floor(edge) ? json(static_cast<int64_t>(edge)) : json(edge);
    return openai_error(
        400,
        "Invalid '" + std::string(o.name) + "': " + kind +
            (low ? " below minimum value. Expected a value " + std::string(o.lo_open ? "> " : ">= ")
                 : " above maximum value. Expected a value <= ") +
            bound.dump() + ", but got " + v.dump() + " instead.",
        o.name, kind + (low ? "_below_min_value" : "_above_max_value"));
  }
  return std::nullopt;
}

// OpenAI options the engine has no counterpart for, each with the value that means "unused".
std::optional<HttpAnswer> refuse_unsupported(const json& body) {
  const std::pair<const char*, json> unsupported[] = {{"logprobs", nullptr},
                                                      {"top_logprobs", nullptr},
                                                      {"echo", false},
                                                      {"suffix", nullptr},
                                                      {"best_of", 1},
                                                      {"logit_bias", nullptr},
                                                      {"frequency_penalty", 0},
                                                      {"presence_penalty", 0},
                                                      {"tools", nullptr},
                                                      {"response_format", nullptr},
                                                      {"n", 1}};
  for (const auto& [name, unused] : unsupported) {
    if (!body.contains(name) || body[name].is_null() || body[name] == unused) continue;
    if (std::string(name) == "logprobs" && body[name] == false) continue;
    return bad(name, std::string(name) + " is not supported by this server (only " +
                         (unused.is_null() ? std::string("null") : unused.dump()) + ")");
  }
  return std::nullopt;
}

// OpenAI's options as params, by the option table's OpenAI names. Temperature 0, or none, is
// greedy search (the engine's deterministic default) and the sampling options are then dropped,
// as OpenAI ignores them; above 0 it samples.
std::variant<json, HttpAnswer> params_of(const json& body) {
  json params = params_by_front_name(body, &protocol::GenerateOption::openai);
  const json& temperature = body.value("temperature", json());  // typed by refuse_mistyped
  if (temperature.is_number() && temperature.get<double>() > 0) {
    params["do_sample"] = true;
  } else {
    for (const char* name : {"temperature", "top_p", "seed"}) params.erase(name);
  }
  return params;
}

std::variant<HttpRequest, HttpAnswer> request_unguarded(std::string_view body,
                                                        const std::string& internal_id, bool chat,
                                                        int64_t now_s, bool route_model) {
  const auto j = parse_object(body);
  if (!j) return bad("", not_utf8(body).value_or("the body must be a JSON object"));
  if (auto refused = refuse_mistyped(*j)) return *refused;
  if (auto refused = refuse_unsupported(*j)) return *refused;
  json request = {{"v", protocol::kVersion}};
  if (chat) {
    auto input = chat_input(j->value("messages", json()));
    if (auto* a = std::get_if<HttpAnswer>(&input)) return *a;
    request["text"] = std::get<std::string>(input);
  } else {
    auto input = prompt_input(j->value("prompt", json()));
    if (auto* a = std::get_if<HttpAnswer>(&input)) return *a;
    request.update(std::get<json>(input));
  }
  auto params = params_of(*j);
  if (auto* a = std::get_if<HttpAnswer>(&params)) return *a;
  if (!std::get<json>(params).empty()) request["params"] = std::get<json>(params);
  const json& stream = j->value("stream", json());
  const bool streamed = stream.is_boolean() && stream.get<bool>();
  if (streamed) {
    if (request.contains("texts")) return bad("stream", "stream takes a single prompt");
    request["stream"] = true;
  }
  if (route_model && j->contains("model")) request["model"] = (*j)["model"];  // checked there
  const json& options = j->value("stream_options", json());
  HttpRequest out = to_gateway(std::move(request), internal_id, "");
  out.chat = chat;
  out.created = now_s;
  // The reply names the model that ran it (a name that is no string is refused by the gateway).
  if (route_model && j->value("model", json()).is_string()) out.model = (*j)["model"];
  out.include_usage =
      streamed && options.is_object() && options.value("include_usage", json()) == true;
  return out;
}

json envelope(const HttpRequest& request, const std::string& model_name, bool chunk) {
  return {{"id", (request.chat ? "chatcmpl-" : "cmpl-") + request.internal_id},
          {"object", request.chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                  : "text_completion"},
          {"created", request.created},
          {"model", model_name}};
}

// OpenAI's finish_reason: "stop" for the model's end token or a stop sequence, "length" when
// max_tokens ran out.
std::string_view openai_finish_reason(protocol::FinishReason reason) {
  return reason == protocol::FinishReason::kLength ? "length" : "stop";
}

// A text's finish_reason: the reply's, or "stop" from a gateway whose replies carry no usage.
json finish_of(const std::vector<protocol::Usage>& usage, size_t index) {
  return index < usage.size() ? json(openai_finish_reason(usage[index].finish_reason))
                              : json("stop");
}

// OpenAI's usage: the request's tokens, its texts' summed.
json usage_object(const std::vector<protocol::Usage>& usage) {
  uint64_t prompt = 0, completion = 0;
  for (const protocol::Usage& u : usage)
    prompt += u.prompt_tokens, completion += u.completion_tokens;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

// One choice: the text whole (a reply) or a piece of it (a chunk); finish_reason null while
// the stream goes on.
json choice(const HttpRequest& request, size_t index, const std::string& text, bool chunk,
            json finish_reason) {
  const bool finished = !finish_reason.is_null();
  json c = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", std::move(finish_reason)}};
  if (!request.chat) {
    c["text"] = text;
  } else if (chunk) {
    c["delta"] = finished ? json::object() : json{{"role", "assistant"}, {"content", text}};
  } else {
    c["message"] = {{"role", "assistant"}, {"content", text}};
  }
  return c;
}

// The error of an error reply (nullopt for an ok one; read_reply's for bytes that are no reply).
std::optional<HttpAnswer> reply_error(const protocol::Reply& reply) {
  if (reply.ok) return std::nullopt;
  const protocol::ErrorCode code = error_code(reply);
  return openai_error(http_status(code), reply.error ? reply.error->message : "", "",
                      std::string(protocol::wire_name(code)));
}

std::string first_text(const protocol::Reply& reply) {
  return reply.texts.empty() ? std::string() : reply.texts[0];
}

HttpAnswer reply_unguarded(const protocol::Reply& reply, const HttpRequest& request,
                           const std::string& model_name) {
  if (auto error = reply_error(reply)) return *error;
  const std::vector<protocol::Usage>& usage = reply.usage;
  json out = envelope(request, model_name, false);
  out["choices"] = json::array();
  for (size_t i = 0; i < reply.texts.size(); ++i)
    out["choices"].push_back(choice(request, i, reply.texts[i], false, finish_of(usage, i)));
  if (!usage.empty()) out["usage"] = usage_object(usage);
  return {.status = 200, .body = out.dump()};
}

std::string events_unguarded(const protocol::Reply& reply, const HttpRequest& request,
                             const std::string& model_name) {
  if (auto error = reply_error(reply)) return "data: " + error->body + "\n\n";
  const bool partial = reply.partial;
  const std::vector<protocol::Usage>& usage = reply.usage;
  json out = envelope(request, model_name, true);
  // The final reply's text is the partials' already sent: its chunk only says the text ended.
  out["choices"] = json::array({partial ? choice(request, 0, first_text(reply), true, nullptr)
                                        : choice(request, 0, "", true, finish_of(usage, 0))});
  // With include_usage every chunk has "usage": null, and one more, with no choices, the usage.
  if (request.include_usage) out["usage"] = nullptr;
  std::string events = "data: " + out.dump() + "\n\n";
  if (partial) return events;
  if (request.include_usage) {
    json last = envelope(request, model_name, true);
    last["choices"] = json::array();
    last["usage"] = usage_object(usage);
    events += "data: " + last.dump() + "\n\n";
  }
  return events + "data: [DONE]\n\n";
}

}  // namespace

std::variant<HttpRequest, HttpAnswer> openai_request(std::string_view body,
                                                     const std::string& internal_id, bool chat,
                                                     int64_t now_s, bool route_model) {
  try {
    return request_unguarded(body, internal_id, chat, now_s, route_model);
  } catch (const json::exception& e) {
    return bad("", std::string("the body does not fit the request: ") + e.what());
  }
}

// A text that is not UTF-8 cannot be JSON: answered as a reply that cannot be read.
HttpAnswer openai_reply(const protocol::Reply& reply, const HttpRequest& request,
                        const std::string& model_name) {
  try {
    return reply_unguarded(reply, request, model_name);
  } catch (const json::exception&) {
    return openai_error(500, "undecodable reply", "", "internal");
  }
}

HttpAnswer openai_reply(std::string_view msgpack_reply, const HttpRequest& request,
                        const std::string& model_name) {
  return openai_reply(read_reply(msgpack_reply), request, model_name);
}

std::string openai_events(const protocol::Reply& reply, const HttpRequest& request,
                          const std::string& model_name) {
  try {
    return events_unguarded(reply, request, model_name);
  } catch (const json::exception&) {
    return "data: " + openai_error(500, "undecodable reply", "", "internal").body + "\n\n";
  }
}

std::string openai_events(std::string_view msgpack_reply, const HttpRequest& request,
                          const std::string& model_name) {
  return openai_events(read_reply(msgpack_reply), request, model_name);
}

std::string openai_model(const std::string& model_name, int64_t created) {
  return json{
      {"id", model_name}, {"object", "model"}, {"created", created}, {"owned_by", "seqpipe"}}
      .dump();
}

std::string openai_models(const std::vector<std::string>& names, int64_t created) {
  json data = json::array();
  for (const std::string& name : names) data.push_back(json::parse(openai_model(name, created)));
  return json{{"object", "list"}, {"data", std::move(data)}}.dump();
}

HttpAnswer openai_error(int status, const std::string& message, const std::string& param,
                        const std::string& code) {
  json error = {{"message", message},
                {"type", error_type(status)},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", code.empty() ? json(nullptr) : json(code)}};
  return {.status = status, .body = json{{"error", std::move(error)}}.dump()};
}

}  // namespace seqpipe::gateway
