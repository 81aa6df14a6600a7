#include "gateway/http_tgi.h"

#include "gateway/json_body.h"

namespace seqpipe::gateway {

using nlohmann::json;

namespace {

HttpAnswer invalid(const std::string& message) {
  return tgi_error(422, message, "validation");
}

// TGI's documented types and ranges of the parameters read here (its GenerateParameters schema
// and its router's validation), checked before anything is mapped, in its words. Null is every
// parameter's default.
struct TypedParameter {
  const char* name;
  enum Kind { kNumber, kInteger, kUnsigned, kBoolean } kind;
  const char* range = nullptr;  // its message when out of range (nullptr: any value)
  bool (*fits)(double) = nullptr;
};
constexpr TypedParameter kTypedParameters[] = {
    {"temperature", TypedParameter::kNumber, "`temperature` must be strictly positive",
     [](double x) { return x > 0; }},
    {"repetition_penalty", TypedParameter::kNumber,
     "`repetition_penalty` must be strictly positive", [](double x) { return x > 0; }},
    // 0 is this server's "no top-k filtering" (the protocol's), which TGI would refuse.
    {"top_k", TypedParameter::kInteger, "`top_k` must be strictly positive",
     [](double x) { return x >= 0; }},
    {"top_p", TypedParameter::kNumber, "`top_p` must be > 0.0 and < 1.0",
     [](double x) { return x > 0 && x < 1; }},
    {"max_new_tokens", TypedParameter::kInteger, "`max_new_tokens` must be strictly positive",
     [](double x) { return x > 0; }},
    {"seed", TypedParameter::kUnsigned},
    {"best_of", TypedParameter::kInteger, "`best_of` must be strictly positive",
     [](double x) { return x > 0; }},
    {"do_sample", TypedParameter::kBoolean},
    {"details", TypedParameter::kBoolean},
    {"decoder_input_details", TypedParameter::kBoolean},
    {"return_full_text", TypedParameter::kBoolean},
    {"watermark", TypedParameter::kBoolean},
};

std::optional<HttpAnswer> refuse_mistyped(const json& parameters) {
  static constexpr const char* kExpected[] = {"a number", "an integer", "an unsigned integer",
                                              "a boolean"};
  for (const TypedParameter& p : kTypedParameters) {
    const auto it = parameters.find(p.name);
    if (it == parameters.end() || it->is_null()) continue;
    const json& v = *it;
    const bool typed = p.kind == TypedParameter::kNumber     ? v.is_number()
                       : p.kind == TypedParameter::kInteger  ? v.is_number_integer()
                       : p.kind == TypedParameter::kUnsigned ? v.is_number_unsigned()
                                                             : v.is_boolean();
    if (!typed) {
      return invalid("Failed to deserialize the JSON body into the target type: parameters." +
                     std::string(p.name) + ": invalid type: " + std::string(v.type_name()) + " " +
                     v.dump() + ", expected " + kExpected[p.kind]);
    }
    if (p.fits != nullptr && !p.fits(v.get<double>())) return invalid(p.range);
  }
  return std::nullopt;
}

// TGI's parameters without a counterpart here, each with the value that means "unused".
std::optional<HttpAnswer> refuse_unsupported(const json& parameters) {
  const std::pair<const char*, json> unsupported[] = {{"decoder_input_details", false},
                                                      {"return_full_text", false},
                                                      {"best_of", 1},
                                                      {"truncate", nullptr},
                                                      {"typical_p", nullptr},
                                                      {"watermark", false},
                                                      {"top_n_tokens", nullptr},
                                                      {"grammar", nullptr},
                                                      {"frequency_penalty", nullptr},
                                                      {"adapter_id", nullptr}};
  for (const auto& [name, unused] : unsupported) {
    if (!parameters.contains(name) || parameters[name].is_null() || parameters[name] == unused)
      continue;
    return invalid(std::string("parameters.") + name + " is not supported by this server (only " +
                   (unused.is_null() ? std::string("null") : unused.dump()) + ")");
  }
  return std::nullopt;
}

std::variant<HttpRequest, HttpAnswer> request_unguarded(std::string_view body,
                                                        const std::string& internal_id,
                                                        bool stream) {
  const auto j = parse_object(body);
  if (!j) return invalid(not_utf8(body).value_or("the body must be a JSON object with \"inputs\""));
  const json& inputs = j->value("inputs", json());
  if (!inputs.is_string()) return invalid("inputs must be a string");
  const json& parameters = j->value("parameters", json::object());
  if (!parameters.is_object()) return invalid("parameters must be an object");
  if (auto refused = refuse_mistyped(parameters)) return *refused;
  if (auto refused = refuse_unsupported(parameters)) return *refused;
  json params = params_by_front_name(parameters, &protocol::GenerateOption::tgi);
  // As in TGI, a sampling parameter turns sampling on.
  if (!params.contains("do_sample") &&
      (params.contains("temperature") || params.contains("top_k") || params.contains("top_p")))
    params["do_sample"] = true;
  json request = {{"v", protocol::kVersion}, {"text", inputs}};
  if (!params.empty()) request["params"] = std::move(params);
  if (stream) request["stream"] = true;
  HttpRequest out = to_gateway(std::move(request), internal_id, "");
  out.details = parameters.value("details", json()) == true;
  return out;
}

// The error of an error reply (nullopt for an ok one; read_reply's for bytes that are no reply).
// TGI answers a request it refuses 422 and an overloaded server 429; other codes keep their
// status.
std::optional<HttpAnswer> reply_error(const protocol::Reply& reply) {
  if (reply.ok) return std::nullopt;
  const protocol::ErrorCode code = error_code(reply);
  const int status = http_status(code);
  const bool validation = status == 400 || status == 413;
  return tgi_error(validation ? 422 : status, reply.error ? reply.error->message : "",
                   validation ? "validation" : std::string(protocol::wire_name(code)));
}

std::string first_text(const protocol::Reply& reply) {
  return reply.texts.empty() ? std::string() : reply.texts[0];
}

// TGI's names for why a text ended.
std::string_view tgi_finish_reason(protocol::FinishReason reason) {
  switch (reason) {
    case protocol::FinishReason::kEos:
      return "eos_token";
    case protocol::FinishReason::kLength:
      return "length";
    case protocol::FinishReason::kStop:
      return "stop_sequence";
  }
  return "stop_sequence";
}

// The details of an ok reply's text, as TGI gives them: /generate's (with its token lists,
// empty: the protocol gives counts, not tokens) or a stream's last event's (with input_length).
// The seed is null: the reply does not say which seed a sampled text drew from.
json details(const protocol::Reply& reply, bool stream) {
  const protocol::Usage u = reply.usage.empty() ? protocol::Usage{} : reply.usage[0];
  json d = {{"finish_reason", tgi_finish_reason(u.finish_reason)},
            {"generated_tokens", u.completion_tokens},
            {"seed", nullptr}};
  if (stream) {
    d["input_length"] = u.prompt_tokens;
  } else {
    d["prefill"] = json::array();
    d["tokens"] = json::array();
  }
  return d;
}

json token(const std::string& text, bool special) {
  // The protocol streams text pieces, not tokens: the piece stands in for a token's text, and
  // a token id or log-probability it cannot give is 0.
  return {{"id", 0}, {"text", text}, {"logprob", 0.0}, {"special", special}};
}

}  // namespace

std::variant<HttpRequest, HttpAnswer> tgi_request(std::string_view body,
                                                  const std::string& internal_id, bool stream) {
  try {
    return request_unguarded(body, internal_id, stream);
  } catch (const json::exception& e) {
    return invalid(std::string("the body does not fit the request: ") + e.what());
  }
}

// A text that is not UTF-8 cannot be JSON: answered as a reply that cannot be read.
HttpAnswer tgi_reply(const protocol::Reply& reply, const HttpRequest& request) {
  try {
    if (auto error = reply_error(reply)) return *error;
    json out = {{"generated_text", first_text(reply)}};
    if (request.details) out["details"] = details(reply, false);
    return {.status = 200, .body = out.dump()};
  } catch (const json::exception&) {
    return tgi_error(500, "undecodable reply", "internal");
  }
}

HttpAnswer tgi_reply(std::string_view msgpack_reply, const HttpRequest& request) {
  return tgi_reply(read_reply(msgpack_reply), request);
}

std::string tgi_event(const protocol::Reply& reply, uint32_t index, const HttpRequest& request) {
  try {
    if (auto error = reply_error(reply)) return "data: " + error->body + "\n\n";
    const bool partial = reply.partial;
    // The final reply's text is the partials' already sent: its token is empty and special, so
    // a client joining non-special tokens gets the text once.
    const json event = {
        {"index", index},
        {"token", token(partial ? first_text(reply) : "", !partial)},
        {"generated_text", partial ? json(nullptr) : json(first_text(reply))},
        {"details", !partial && request.details ? details(reply, true) : json(nullptr)}};
    return "data: " + event.dump() + "\n\n";
  } catch (const json::exception&) {
    return "data: " + tgi_error(500, "undecodable reply", "internal").body + "\n\n";
  }
}

std::string tgi_event(std::string_view msgpack_reply, uint32_t index, const HttpRequest& request) {
  return tgi_event(read_reply(msgpack_reply), index, request);
}

std::string tgi_info(const std::string& model_name) {
  return json{{"model_id", model_name},
              {"model_pipeline_tag", "text2text-generation"},
              {"router", "seqpipe"},
              {"version", "1"}}
      .dump();
}

HttpAnswer tgi_error(int status, const std::string& message, const std::string& type) {
  return {.status = status, .body = json{{"error", message}, {"error_type", type}}.dump()};
}

}  // namespace seqpipe::gateway
