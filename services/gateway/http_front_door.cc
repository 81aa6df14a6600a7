#include "gateway/http_front_door.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

namespace seqpipe::gateway {

using nlohmann::json;

namespace {

std::string_view as_view(const std::vector<uint8_t>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

HttpAnswer error_answer(protocol::ErrorCode code, std::string message, const std::string& id) {
  return generate_reply(
      protocol::encode_reply(protocol::error_reply(id, {code, std::move(message)})), id);
}

HttpAnswer kserve_error(int status, const std::string& message) {
  return {status, json{{"error", message}}.dump()};
}

// The JSON object in `body`, or nullopt.
std::optional<json> parse_object(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

// The reply's HTTP status: 200, or its error code's.
int status_of(const json& reply) {
  if (reply.value("status", "") != "error") return 200;
  const json& error = reply.value("error", json::object());
  const auto code = protocol::parse_error_code(error.value("code", "internal"));
  return http_status(code.value_or(protocol::ErrorCode::kInternal));
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

HttpRequest to_gateway(json request, const std::string& internal_id, std::string client_id) {
  HttpRequest out;
  out.timeout_ms = timeout_of(request);
  out.client_id = std::move(client_id);
  request["id"] = internal_id;
  out.msgpack = std::string(as_view(json::to_msgpack(request)));
  return out;
}

}  // namespace

int http_status(protocol::ErrorCode code) {
  switch (code) {
    case protocol::ErrorCode::kInvalidArgument:
      return 400;
    case protocol::ErrorCode::kTooLong:
      return 413;
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

std::variant<HttpRequest, HttpAnswer> generate_request(std::string_view body,
                                                       const std::string& internal_id) {
  auto request = parse_object(body);
  if (!request)
    return error_answer(protocol::ErrorCode::kInvalidArgument,
                        "the body must be a JSON object (the msgpack request's fields)", "");
  const auto client_id = client_id_of(*request);
  if (!client_id)
    return error_answer(protocol::ErrorCode::kInvalidArgument, "id must be a string", "");
  if (!request->contains("v")) (*request)["v"] = protocol::kVersion;
  return to_gateway(std::move(*request), internal_id, *client_id);
}

HttpAnswer generate_reply(std::string_view msgpack_reply, const std::string& client_id) {
  json reply = json::from_msgpack(msgpack_reply, /*strict=*/true, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object())
    return {500, json{{"v", protocol::kVersion},
                      {"id", client_id},
                      {"status", "error"},
                      {"error", {{"code", "internal"}, {"message", "undecodable reply"}}}}
                     .dump()};
  reply["id"] = client_id;
  return {status_of(reply), reply.dump()};
}

std::variant<HttpRequest, HttpAnswer> kserve_infer_request(std::string_view body,
                                                           const std::string& internal_id) {
  const auto infer = parse_object(body);
  if (!infer) return kserve_error(400, "the body must be a JSON object (an inference request)");
  const auto client_id = client_id_of(*infer);
  if (!client_id) return kserve_error(400, "id must be a string");
  const json& inputs = infer->value("inputs", json());
  if (!inputs.is_array() || inputs.size() != 1 || !inputs[0].is_object())
    return kserve_error(400, "inputs must hold exactly one tensor: the texts, datatype BYTES");
  const json& input = inputs[0];
  if (input.value("datatype", "") != "BYTES")
    return kserve_error(400, "inputs[0].datatype must be \"BYTES\" (the texts)");
  json texts = input.value("data", json());
  if (texts.is_array() && !texts.empty() && texts[0].is_array()) {  // [[a], [b]]: shape [N, 1]
    json flat = json::array();
    for (const json& row : texts) {
      if (!row.is_array()) return kserve_error(400, "inputs[0].data must be texts");
      for (const json& t : row) flat.push_back(t);
    }
    texts = std::move(flat);
  }
  if (!texts.is_array() || texts.empty())
    return kserve_error(400, "inputs[0].data must be a non-empty array of texts");
  for (const json& t : texts) {
    if (!t.is_string()) return kserve_error(400, "inputs[0].data must hold strings");
  }
  const json& shape = input.value("shape", json());
  uint64_t elements = 1;
  if (!shape.is_array() || shape.empty())
    return kserve_error(400, "inputs[0].shape must be [N] or [N, 1]");
  for (const json& d : shape) {
    if (!d.is_number_unsigned()) return kserve_error(400, "inputs[0].shape must be [N] or [N, 1]");
    elements *= d.get<uint64_t>();
  }
  if (elements != texts.size())
    return kserve_error(400, "inputs[0].shape holds " + std::to_string(elements) +
                                 " elements but data " + std::to_string(texts.size()));
  json request = {{"v", protocol::kVersion}, {"texts", std::move(texts)}};
  json params = infer->value("parameters", json::object());
  if (!params.is_object()) return kserve_error(400, "parameters must be an object");
  if (params.contains("timeout_ms")) {
    request["timeout_ms"] = params["timeout_ms"];
    params.erase("timeout_ms");
  }
  if (!params.empty()) request["params"] = std::move(params);
  return to_gateway(std::move(request), internal_id, *client_id);
}

HttpAnswer kserve_infer_reply(std::string_view msgpack_reply, const std::string& client_id,
                              const std::string& model_name) {
  const json reply = json::from_msgpack(msgpack_reply, true, false);
  if (reply.is_discarded() || !reply.is_object()) return kserve_error(500, "undecodable reply");
  if (reply.value("status", "") == "error") {
    const json& error = reply.value("error", json::object());
    return kserve_error(status_of(reply),
                        error.value("code", "internal") + ": " + error.value("message", ""));
  }
  const json texts = reply.contains("texts") ? reply["texts"] : json::array({reply["text"]});
  json outputs = json::array(
      {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {texts.size()}}, {"data", texts}}});
  if (reply.contains("scores")) {
    outputs.push_back({{"name", "scores"},
                       {"datatype", "FP32"},
                       {"shape", {reply["scores"].size()}},
                       {"data", reply["scores"]}});
  }
  json response = {{"model_name", model_name}, {"outputs", std::move(outputs)}};
  if (!client_id.empty()) response["id"] = client_id;
  if (reply.contains("timings_us")) response["parameters"] = {{"timings_us", reply["timings_us"]}};
  return {200, response.dump()};
}

std::string kserve_model_metadata(const std::string& model_name) {
  return json{{"name", model_name},
              {"versions", {"1"}},
              {"platform", "seqpipe_t5"},
              {"inputs", {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {-1}}}}},
              {"outputs",
               {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {-1}}},
                {{"name", "scores"}, {"datatype", "FP32"}, {"shape", {-1}}}}}}
      .dump();
}

HttpFrontDoor::HttpFrontDoor(zmq::context_t& context, std::string gateway_endpoint,
                             HttpOptions options, std::function<bool()> ready)
    : context_(context),
      gateway_endpoint_(std::move(gateway_endpoint)),
      options_(std::move(options)),
      ready_(std::move(ready)),
      server_(std::make_unique<httplib::Server>()) {
  httplib::Server& s = *server_;
  s.set_payload_max_length(options_.max_body_bytes);
  const auto read = options_.read_timeout;
  s.set_read_timeout(read.count() / 1000, (read.count() % 1000) * 1000);
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty())  // a route's own answer already has a body
      res.set_content(json{{"error", "HTTP " + std::to_string(res.status)}}.dump(),
                      "application/json");
  });
  auto answer = [](httplib::Response& res, const HttpAnswer& a) {
    res.status = a.status;
    res.set_content(a.body, "application/json");
  };
  s.Post("/v1/generate", [this, answer](const httplib::Request& req, httplib::Response& res) {
    auto request = generate_request(req.body, next_id());
    if (auto* a = std::get_if<HttpAnswer>(&request)) return answer(res, *a);
    const auto& r = std::get<HttpRequest>(request);
    answer(res, generate_reply(exchange(r), r.client_id));
  });
  s.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  s.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
    res.status = ready_() ? 200 : 503;
    res.set_content("{}", "application/json");
  });
  const std::string model = "/v2/models/" + options_.model_name;
  s.Get(model, [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(kserve_model_metadata(options_.model_name), "application/json");
  });
  s.Get(model + "/ready", [this](const httplib::Request&, httplib::Response& res) {
    res.status = ready_() ? 200 : 503;
    res.set_content("{}", "application/json");
  });
  s.Post(model + "/infer", [this, answer](const httplib::Request& req, httplib::Response& res) {
    auto request = kserve_infer_request(req.body, next_id());
    if (auto* a = std::get_if<HttpAnswer>(&request)) return answer(res, *a);
    const auto& r = std::get<HttpRequest>(request);
    answer(res, kserve_infer_reply(exchange(r), r.client_id, options_.model_name));
  });
  s.Get(R"(/v2/models/([^/]+)(/ready)?)",
        [answer](const httplib::Request& req, httplib::Response& res) {
          answer(res, kserve_error(404, "unknown model '" + req.matches[1].str() + "'"));
        });
  port_ = options_.port == 0 ? s.bind_to_any_port(options_.host)
                             : (s.bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0)
    throw std::runtime_error("http: cannot listen on " + options_.host + ":" +
                             std::to_string(options_.port));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

HttpFrontDoor::~HttpFrontDoor() {
  stopping_ = true;
  server_->stop();
  thread_.join();
}

std::string HttpFrontDoor::next_id() {
  std::lock_guard lock(mutex_);
  return "http-" + std::to_string(next_id_++);
}

std::unique_ptr<transport::Socket> HttpFrontDoor::checkout() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      auto socket = std::move(idle_.back());
      idle_.pop_back();
      return socket;
    }
  }
  auto socket = std::make_unique<transport::Socket>(context_, zmq::socket_type::dealer);
  socket->connect(gateway_endpoint_);
  return socket;
}

void HttpFrontDoor::give_back(std::unique_ptr<transport::Socket> socket) {
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(socket));
}

std::string HttpFrontDoor::exchange(const HttpRequest& request) {
  const std::string id = json::from_msgpack(request.msgpack)["id"];
  auto socket = checkout();
  // The gateway answers every request by its deadline; the margin covers the trip back.
  const auto wait = (request.timeout_ms ? std::chrono::milliseconds(*request.timeout_ms)
                                        : options_.default_timeout) +
                    std::chrono::seconds(2);
  const auto until = std::chrono::steady_clock::now() + wait;
  if (socket->send({std::string_view(), std::string_view(request.msgpack)})) {
    while (!stopping_) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      auto frames = socket->recv(std::min(left, std::chrono::milliseconds(100)));
      if (!frames || frames->empty()) continue;
      const std::string& body = frames->back();
      auto reply = protocol::decode_reply(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
      if (const auto* r = std::get_if<protocol::Reply>(&reply); r && r->id != id)
        continue;  // a late reply to an earlier request on this socket
      give_back(std::move(socket));
      return body;
    }
  }
  spdlog::warn("http: no reply from the gateway for {} in time", id);
  return protocol::encode_reply(protocol::error_reply(
      id, {protocol::ErrorCode::kUnavailable, "no reply from the gateway in time"}));
}

}  // namespace seqpipe::gateway
