#include "gateway/http_json.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <span>

#include "gateway/json_body.h"

namespace seqpipe::gateway {

using nlohmann::json;

namespace {

HttpAnswer error_answer(protocol::ErrorCode code, std::string message, const std::string& id) {
  return generate_reply(protocol::error_reply(id, {code, std::move(message)}), id);
}

json timings_json(const protocol::Timings& t) {
  return {{"queue", t.queue_us},   {"tokenize", t.tokenize_us}, {"batch_wait", t.batch_wait_us},
          {"encode", t.encode_us}, {"decode", t.decode_us},     {"postprocess", t.postprocess_us},
          {"total", t.total_us}};
}

// The reply's fields as encode_reply writes them, as JSON, with `id`.
json reply_json(const protocol::Reply& reply, const std::string& id) {
  json j = {{"v", protocol::kVersion}, {"id", id}};
  const std::string first = reply.texts.empty() ? std::string() : reply.texts[0];
  if (reply.partial) {
    j["status"] = "partial";
    j["text"] = first;
    return j;
  }
  j["status"] = reply.ok ? "ok" : "error";
  if (!reply.ok) {
    const std::string message = reply.error ? reply.error->message : "unspecified error";
    j["error"] = {{"code", protocol::wire_name(error_code(reply))}, {"message", message}};
  } else {
    if (reply.batch_form) {
      j["texts"] = reply.texts;
    } else {
      j["text"] = first;
    }
    if (reply.scores) j["scores"] = *reply.scores;
    if (reply.sequences) {
      json& sequences = j["sequences"] = json::array();
      for (const auto& hypotheses : *reply.sequences) {
        json& text = sequences.emplace_back(json::array());
        for (const protocol::Sequence& h : hypotheses)
          text.push_back({{"text", h.text}, {"score", h.score}});
      }
    }
    if (!reply.usage.empty()) {
      json& usage = j["usage"] = json::array();
      for (const protocol::Usage& u : reply.usage) {
        usage.push_back({{"prompt_tokens", u.prompt_tokens},
                         {"completion_tokens", u.completion_tokens},
                         {"finish_reason", protocol::wire_name(u.finish_reason)}});
      }
    }
  }
  j["timings_us"] = timings_json(reply.timings);
  return j;
}

// Deeper JSON than any valid request has: refused before parsing, since converting and printing
// a document recurse once per level.
constexpr int kMaxJsonDepth = 16;

bool shallow(std::string_view body) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// The id field as the client sent it, or an error when it is not a string.
std::optional<std::string> client_id_of(const json& j) {
  if (!j.contains("id")) return std::string();
  if (!j["id"].is_string()) return std::nullopt;
  return j["id"].get<std::string>();
}

std::optional<uint32_t> timeout_of(const json& j) {
  if (j.contains("timeout_ms") && j["timeout_ms"].is_number_unsigned())
    return static_cast<uint32_t>(std::min<uint64_t>(j["timeout_ms"].get<uint64_t>(), UINT32_MAX));
  return std::nullopt;
}

}  // namespace

std::optional<json> parse_object(std::string_view body) {
  if (!shallow(body)) return std::nullopt;
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

std::optional<std::string> not_utf8(std::string_view body) {
  const auto at = protocol::find_invalid_utf8(body);
  if (!at) return std::nullopt;
  return "the body is not valid UTF-8 (byte " + std::to_string(*at) + ")";
}

json params_by_front_name(const json& body, protocol::FrontName protocol::GenerateOption::*column) {
  json params = json::object();
  for (const protocol::GenerateOption& option : protocol::generate_options()) {
    const protocol::FrontName& front = option.*column;
    for (const std::string_view name : {front.name, front.alias}) {
      if (name.empty()) continue;
      const auto it = body.find(name);
      if (it == body.end() || it->is_null()) continue;
      params[std::string(option.name)] =
          protocol::takes_list(option) && it->is_string() ? json::array({*it}) : *it;
    }
  }
  return params;
}

HttpRequest to_gateway(json request, const std::string& internal_id, std::string client_id) {
  HttpRequest out;
  out.timeout_ms = timeout_of(request);
  out.stream =
      request.contains("stream") && request["stream"].is_boolean() && request["stream"].get<bool>();
  out.client_id = std::move(client_id);
  out.internal_id = internal_id;
  request["id"] = internal_id;
  out.fields = std::move(request);
  return out;
}

protocol::ErrorCode error_code(const protocol::Reply& reply) {
  return reply.error ? reply.error->code : protocol::ErrorCode::kInternal;
}

protocol::Reply read_reply(std::string_view msgpack_reply, const std::string& id) {
  auto decoded = protocol::decode_reply(std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(msgpack_reply.data()), msgpack_reply.size()));
  if (auto* reply = std::get_if<protocol::Reply>(&decoded)) return std::move(*reply);
  return protocol::error_reply(id, {protocol::ErrorCode::kInternal, "undecodable reply"});
}

int http_status(protocol::ErrorCode code) {
  switch (code) {
    case protocol::ErrorCode::kInvalidArgument:
      return 400;
    case protocol::ErrorCode::kTooLong:
      return 413;
    case protocol::ErrorCode::kNotFound:
      return 404;
    case protocol::ErrorCode::kOverloaded:
      return 429;
    case protocol::ErrorCode::kCancelled:
      return 499;  // the client closed the request (nginx's code): no standard one fits
    case protocol::ErrorCode::kInternal:
      return 500;
    case protocol::ErrorCode::kUnavailable:
      return 503;
    case protocol::ErrorCode::kDeadlineExceeded:
      return 504;
  }
  return 500;
}

namespace {

std::variant<HttpRequest, HttpAnswer> generate_request_unguarded(std::string_view body,
                                                                 const std::string& internal_id) {
  auto request = parse_object(body);
  if (!request)
    return error_answer(
        protocol::ErrorCode::kInvalidArgument,
        not_utf8(body).value_or("the body must be a JSON object (the msgpack request's fields)"),
        "");
  const auto client_id = client_id_of(*request);
  if (!client_id)
    return error_answer(protocol::ErrorCode::kInvalidArgument, "id must be a string", "");
  // An HTTP request's id is its own connection's: a cancel could name no other request. Closing
  // a streamed request's connection cancels it.
  if (request->contains("op") && (*request)["op"] != "generate")
    return error_answer(protocol::ErrorCode::kInvalidArgument,
                        "op must be \"generate\" over HTTP (close the connection to cancel)",
                        *client_id);
  if (!request->contains("v")) (*request)["v"] = protocol::kVersion;
  return to_gateway(std::move(*request), internal_id, *client_id);
}

std::variant<HttpRequest, std::string> kserve_infer_json_unguarded(const json& infer,
                                                                   const std::string& internal_id,
                                                                   bool stream) {
  const auto client_id = client_id_of(infer);
  if (!client_id) return "id must be a string";
  const json& inputs = infer.value("inputs", json());
  if (!inputs.is_array() || inputs.size() != 1 || !inputs[0].is_object())
    return std::string("inputs must hold exactly one tensor: the texts, datatype BYTES");
  const json& input = inputs[0];
  if (input.value("datatype", "") != "BYTES")
    return std::string("inputs[0].datatype must be \"BYTES\" (the texts)");
  json texts = input.value("data", json());
  if (texts.is_array() && !texts.empty() && texts[0].is_array()) {  // [[a], [b]]: shape [N, 1]
    json flat = json::array();
    for (const json& row : texts) {
      if (!row.is_array()) return std::string("inputs[0].data must be texts");
      for (const json& t : row) flat.push_back(t);
    }
    texts = std::move(flat);
  }
  if (!texts.is_array() || texts.empty())
    return std::string("inputs[0].data must be a non-empty array of texts");
  for (const json& t : texts) {
    if (!t.is_string()) return std::string("inputs[0].data must hold strings");
  }
  // Only [N] or [N, 1]: no product of dimensions, so nothing to overflow.
  const json& shape = input.value("shape", json());
  const bool fits = shape.is_array() && (shape.size() == 1 || shape.size() == 2) &&
                    shape[0].is_number_unsigned() &&
                    (shape.size() == 1 || (shape[1].is_number_unsigned() && shape[1] == 1));
  if (!fits) return std::string("inputs[0].shape must be [N] or [N, 1]");
  if (shape[0].get<uint64_t>() != texts.size())
    return std::string("inputs[0].shape holds " + std::to_string(shape[0].get<uint64_t>()) +
                       " elements but data " + std::to_string(texts.size()));
  json request = {{"v", protocol::kVersion}};
  if (stream && texts.size() == 1) {
    request["text"] = std::move(texts[0]);
    request["stream"] = true;
  } else {
    request["texts"] = std::move(texts);
  }
  json params = infer.value("parameters", json::object());
  if (!params.is_object()) return std::string("parameters must be an object");
  for (const char* field : {"timeout_ms", "model", "version"}) {  // request fields, not params
    if (params.contains(field)) {
      request[field] = params[field];
      params.erase(field);
    }
  }
  if (!params.empty()) request["params"] = std::move(params);
  return to_gateway(std::move(request), internal_id, *client_id);
}

// The reply as a KServe v2 inference response object, or the reply's error.
std::variant<json, protocol::Error> kserve_infer_response(const protocol::Reply& reply,
                                                          const std::string& client_id,
                                                          const std::string& model_name) {
  if (!reply.ok) return protocol::Error{error_code(reply), reply.error ? reply.error->message : ""};
  json outputs = json::array({{{"name", "text"},
                               {"datatype", "BYTES"},
                               {"shape", {reply.texts.size()}},
                               {"data", reply.texts}}});
  if (reply.scores) {
    outputs.push_back({{"name", "scores"},
                       {"datatype", "FP32"},
                       {"shape", {reply.scores->size()}},
                       {"data", *reply.scores}});
  }
  json response = {{"model_name", model_name}, {"outputs", std::move(outputs)}};
  if (!client_id.empty()) response["id"] = client_id;
  if (!reply.partial) response["parameters"] = {{"timings_us", timings_json(reply.timings)}};
  return response;
}

}  // namespace

// The JSON library throws on a value of an unexpected type (a number where a string was
// expected, say); every translation answers that as a bad body or, for a reply, a bad reply.
std::variant<HttpRequest, HttpAnswer> generate_request(std::string_view body,
                                                       const std::string& internal_id) {
  try {
    return generate_request_unguarded(body, internal_id);
  } catch (const json::exception& e) {
    return error_answer(protocol::ErrorCode::kInvalidArgument,
                        std::string("the body does not fit the request: ") + e.what(), "");
  }
}

HttpAnswer generate_reply(const protocol::Reply& reply, const std::string& client_id) {
  try {
    return {.status = reply.ok ? 200 : http_status(error_code(reply)),
            .body = reply_json(reply, client_id).dump()};
  } catch (const json::exception&) {  // a text that is not UTF-8 cannot be JSON
    return error_answer(protocol::ErrorCode::kInternal, "undecodable reply", client_id);
  }
}

HttpAnswer generate_reply(std::string_view msgpack_reply, const std::string& client_id) {
  return generate_reply(read_reply(msgpack_reply, client_id), client_id);
}

std::string sse_event(const protocol::Reply& reply, const std::string& client_id) {
  return "data: " + generate_reply(reply, client_id).body + "\n\n";
}

std::string sse_event(std::string_view msgpack_reply, const std::string& client_id) {
  return sse_event(read_reply(msgpack_reply, client_id), client_id);
}

std::variant<HttpRequest, HttpAnswer> kserve_infer_request(std::string_view body,
                                                           const std::string& internal_id,
                                                           const std::optional<std::string>& model,
                                                           std::optional<uint32_t> version) {
  auto infer = parse_object(body);
  if (!infer)
    return kserve_error(
        400, not_utf8(body).value_or("the body must be a JSON object (an inference request)"));
  if (auto params = infer->find("parameters"); params != infer->end() && !params->is_object())
    return kserve_error(400, "parameters must be an object");
  if (model) {  // the path's, into the protocol request's fields (kserve_infer_json_unguarded)
    (*infer)["parameters"]["model"] = *model;
    if (version) (*infer)["parameters"]["version"] = *version;
  }
  auto request = kserve_infer_json(*infer, internal_id);
  if (auto* problem = std::get_if<std::string>(&request)) return kserve_error(400, *problem);
  if (model) std::get<HttpRequest>(request).model = *model;
  return std::move(std::get<HttpRequest>(request));
}

std::variant<HttpRequest, std::string> kserve_infer_json(const json& infer,
                                                         const std::string& internal_id,
                                                         bool stream) {
  try {
    return kserve_infer_json_unguarded(infer, internal_id, stream);
  } catch (const json::exception& e) {
    return std::string("the request does not fit an inference request: ") + e.what();
  }
}

HttpAnswer kserve_infer_reply(const protocol::Reply& reply, const std::string& client_id,
                              const std::string& model_name) {
  auto response = kserve_infer_response(reply, client_id, model_name);
  if (auto* error = std::get_if<protocol::Error>(&response)) {
    return kserve_error(http_status(error->code),
                        std::string(protocol::wire_name(error->code)) + ": " + error->message);
  }
  try {
    return {.status = 200, .body = std::get<json>(response).dump()};
  } catch (const json::exception&) {  // a text that is not UTF-8 cannot be JSON
    return kserve_error(500, "internal: undecodable reply");
  }
}

HttpAnswer kserve_infer_reply(std::string_view msgpack_reply, const std::string& client_id,
                              const std::string& model_name) {
  return kserve_infer_reply(read_reply(msgpack_reply, client_id), client_id, model_name);
}

std::optional<KserveModelPath> kserve_model_path(std::string_view path, std::string_view suffix) {
  constexpr std::string_view kModels = "/v2/models/", kVersions = "/versions/";
  if (!path.starts_with(kModels) || !path.ends_with(suffix)) return std::nullopt;
  std::string_view rest = path.substr(kModels.size());
  rest.remove_suffix(suffix.size());
  KserveModelPath out;
  const size_t slash = rest.find('/');
  out.name = std::string(rest.substr(0, slash));
  if (out.name.empty()) return std::nullopt;
  if (slash == std::string_view::npos) return out;
  const std::string_view tail = rest.substr(slash);
  if (!tail.starts_with(kVersions)) return std::nullopt;
  const std::string_view number = tail.substr(kVersions.size());
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (ec != std::errc() || end != number.data() + number.size() || v == 0) return std::nullopt;
  out.version = v;
  return out;
}

HttpAnswer kserve_error(int status, const std::string& message) {
  return {.status = status, .body = json{{"error", message}}.dump()};
}

HttpAnswer unrouted_request(std::string_view method, std::string_view path,
                            const std::string& model_name) {
  constexpr std::string_view kModels = "/v2/models/";
  if (path.starts_with(kModels)) {
    const std::string_view rest = path.substr(kModels.size());
    const std::string name(rest.substr(0, rest.find('/')));
    if (name != model_name) {
      return kserve_error(404, "unknown model '" + name + "': this gateway serves '" + model_name +
                                   "' (GET /v2/models/" + model_name + ")");
    }
  }
  // The routes HttpFrontDoor registers, as the messages name them.
  const std::string model = std::string(kModels) + model_name;
  const std::pair<std::string_view, std::string> routes[] = {
      {"POST", "/v1/generate"},
      {"POST", "/v1/completions"},
      {"POST", "/v1/chat/completions"},
      {"GET", "/v1/models"},
      {"GET", "/v1/models/" + model_name},
      {"POST", "/generate"},
      {"POST", "/generate_stream"},
      {"GET", "/info"},
      {"GET", "/health"},
      {"GET", "/v2/health/live"},
      {"GET", "/v2/health/ready"},
      {"GET", model},
      {"GET", model + "/ready"},
      {"POST", model + "/infer"},
  };
  std::string allow, all;
  for (const auto& [route_method, route_path] : routes) {
    if (route_path == path) allow += (allow.empty() ? "" : ", ") + std::string(route_method);
    all += (all.empty() ? "" : ", ") + std::string(route_method) + " " + route_path;
  }
  if (!allow.empty()) {
    HttpAnswer answer = kserve_error(
        405, std::string(method) + " is not allowed on " + std::string(path) + ": use " + allow);
    answer.allow = allow;
    return answer;
  }
  return kserve_error(
      404, "no route " + std::string(method) + " " + std::string(path) + "; the routes: " + all);
}

std::string kserve_model_metadata(const config::ModelCatalog& catalog, const std::string& name,
                                  std::optional<uint32_t> version) {
  json versions = json::array();
  if (version) {
    versions.push_back(std::to_string(*version));
  } else {
    for (const int v : catalog.versions(name)) versions.push_back(std::to_string(v));
  }
  return json{{"name", name},
              {"versions", std::move(versions)},
              {"platform", "seqpipe_t5"},
              {"inputs", {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {-1}}}}},
              {"outputs",
               {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {-1}}},
                {{"name", "scores"}, {"datatype", "FP32"}, {"shape", {-1}}}}}}
      .dump();
}

}  // namespace seqpipe::gateway
