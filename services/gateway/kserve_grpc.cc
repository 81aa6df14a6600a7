#include "gateway/kserve_grpc.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <span>

#include "gateway/json_body.h"

namespace seqpipe::gateway {

using nlohmann::json;

namespace {

grpc::Status invalid(const std::string& message) {
  return {grpc::StatusCode::INVALID_ARGUMENT, message};
}

// A raw BYTES tensor's elements: each a 4-byte little-endian length, then that many bytes.
std::optional<json> raw_texts(std::string_view raw) {
  json texts = json::array();
  while (!raw.empty()) {
    if (raw.size() < 4) return std::nullopt;
    const auto* b = reinterpret_cast<const unsigned char*>(raw.data());
    const uint64_t length = b[0] | b[1] << 8 | b[2] << 16 | uint64_t{b[3]} << 24;
    if (raw.size() - 4 < length) return std::nullopt;
    texts.push_back(std::string(raw.substr(4, length)));
    raw.remove_prefix(4 + length);
  }
  return texts;
}

std::optional<json> parameter_value(const inference::InferParameter& p) {
  using P = inference::InferParameter;
  switch (p.parameter_choice_case()) {
    case P::kBoolParam:
      return json(p.bool_param());
    case P::kInt64Param:  // unsigned when it can be: the mapping's integer checks want that
      return p.int64_param() >= 0 ? json(static_cast<uint64_t>(p.int64_param()))
                                  : json(p.int64_param());
    case P::kStringParam:
      return json(p.string_param());
    case P::kDoubleParam:
      return json(p.double_param());
    case P::kUint64Param:
      return json(p.uint64_param());
    case P::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return std::nullopt;
}

// The request as the KServe v2 JSON request it stands for.
std::variant<json, grpc::Status> as_json(const inference::ModelInferRequest& request) {
  json inputs = json::array();
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    json shape = json::array();
    for (const int64_t d : input.shape()) shape.push_back(d >= 0 ? json(uint64_t(d)) : json(d));
    json data = json::array();
    for (const std::string& t : input.contents().bytes_contents()) data.push_back(t);
    if (i < request.raw_input_contents_size()) {
      auto raw = raw_texts(request.raw_input_contents(i));
      if (!raw)
        return invalid("raw_input_contents[" + std::to_string(i) +
                       "] is not BYTES elements (a 4-byte little-endian length, then the bytes)");
      if (!data.empty()) return invalid("inputs[0] has both contents and raw_input_contents");
      data = std::move(*raw);
    }
    inputs.push_back({{"name", input.name()},
                      {"datatype", input.datatype()},
                      {"shape", std::move(shape)},
                      {"data", std::move(data)}});
  }
  json infer = {{"inputs", std::move(inputs)}};
  if (!request.id().empty()) infer["id"] = request.id();
  json params = json::object();
  for (const auto& [name, value] : request.parameters()) {
    auto v = parameter_value(value);
    if (!v) return invalid("parameters['" + name + "'] holds no value");
    // InferParameter holds no list: a list option (stop) takes one string_param as its one value.
    const protocol::GenerateOption* option = protocol::find_generate_option(name);
    params[name] = option && protocol::takes_list(*option) && v->is_string()
                       ? json::array({std::move(*v)})
                       : std::move(*v);
  }
  if (!params.empty()) infer["parameters"] = std::move(params);
  return infer;
}

// A BYTES "text" output of `texts`.
void add_texts(inference::ModelInferResponse& response, const std::vector<std::string>& texts) {
  auto* tensor = response.add_outputs();
  tensor->set_name("text");
  tensor->set_datatype("BYTES");
  tensor->add_shape(static_cast<int64_t>(texts.size()));
  for (const std::string& text : texts) tensor->mutable_contents()->add_bytes_contents(text);
}

}  // namespace

grpc::StatusCode grpc_code(protocol::ErrorCode code) {
  switch (code) {
    case protocol::ErrorCode::kInvalidArgument:
    case protocol::ErrorCode::kTooLong:  // as invalid_argument: resending it unchanged never helps
      return grpc::StatusCode::INVALID_ARGUMENT;
    case protocol::ErrorCode::kOverloaded:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case protocol::ErrorCode::kDeadlineExceeded:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case protocol::ErrorCode::kCancelled:
      return grpc::StatusCode::CANCELLED;
    case protocol::ErrorCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case protocol::ErrorCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case protocol::ErrorCode::kInternal:
      break;
  }
  return grpc::StatusCode::INTERNAL;
}

grpc::Status check_model(const std::string& name, const std::string& model_name) {
  if (name == model_name) return grpc::Status::OK;
  return {grpc::StatusCode::NOT_FOUND,
          "unknown model '" + name + "': this gateway serves '" + model_name + "'"};
}

std::variant<std::optional<uint32_t>, grpc::Status> kserve_grpc_version(
    const std::string& version) {
  if (version.empty()) return std::nullopt;
  uint32_t v = 0;
  const char* end = version.data() + version.size();
  const auto [stop, ec] = std::from_chars(version.data(), end, v);
  if (ec != std::errc() || stop != end || v < 1 || v > protocol::kMaxModelVersion)
    return invalid("model_version must be empty (the highest served) or a version number, 1 to " +
                   std::to_string(protocol::kMaxModelVersion));
  return v;
}

std::variant<config::ModelVersion, grpc::Status> kserve_grpc_model(
    const config::ModelCatalog& catalog, const std::string& name, const std::string& version) {
  if (catalog.single()) {
    const grpc::Status known = check_model(name, catalog.default_name());
    if (!known.ok()) return known;
  }
  if (name.size() > protocol::kMaxModelNameBytes)  // not echoed in a message
    return invalid("model_name must be at most " + std::to_string(protocol::kMaxModelNameBytes) +
                   " bytes");
  const auto v = kserve_grpc_version(version);
  if (const auto* bad = std::get_if<grpc::Status>(&v)) return *bad;
  auto found = catalog.find(name.empty() ? std::nullopt : std::optional(name),
                            std::get<std::optional<uint32_t>>(v));
  if (auto* error = std::get_if<protocol::Error>(&found))
    return grpc::Status(grpc_code(error->code),
                        std::string(protocol::wire_name(error->code)) + ": " + error->message);
  return std::get<config::ModelVersion>(std::move(found));
}

std::variant<HttpRequest, grpc::Status> kserve_grpc_request(
    const inference::ModelInferRequest& request, const std::string& internal_id,
    std::optional<uint32_t> deadline_ms, bool stream) {
  auto infer = as_json(request);
  if (auto* status = std::get_if<grpc::Status>(&infer)) return *status;
  json& j = std::get<json>(infer);
  const auto version = kserve_grpc_version(request.model_version());
  if (const auto* bad = std::get_if<grpc::Status>(&version)) return *bad;
  // Into the protocol request's fields (kserve_infer_json), over any parameters of those names.
  if (!request.model_name().empty()) j["parameters"]["model"] = request.model_name();
  if (const auto v = std::get<std::optional<uint32_t>>(version)) j["parameters"]["version"] = *v;
  if (deadline_ms) {
    if (!j.contains("parameters")) j["parameters"] = json::object();
    json& params = j["parameters"];
    const json own = params.value("timeout_ms", json());
    // A timeout_ms of another type is left for the gateway to refuse by name.
    if (own.is_null() || (own.is_number_unsigned() && own.get<uint64_t>() > *deadline_ms))
      params["timeout_ms"] = *deadline_ms;
  }
  auto out = kserve_infer_json(j, internal_id, stream);
  if (auto* problem = std::get_if<std::string>(&out)) return invalid(*problem);
  HttpRequest& translated = std::get<HttpRequest>(out);
  translated.message_bytes = request.ByteSizeLong();
  return std::move(translated);
}

std::variant<inference::ModelInferResponse, grpc::Status> kserve_grpc_reply(
    const protocol::Reply& reply, const std::string& client_id, const ResponseModel& model) {
  if (!reply.ok) {
    const protocol::ErrorCode code = error_code(reply);
    return grpc::Status(grpc_code(code), std::string(protocol::wire_name(code)) + ": " +
                                             (reply.error ? reply.error->message : ""));
  }
  inference::ModelInferResponse response;
  response.set_model_name(model.name);
  response.set_model_version(model.version);
  response.set_id(client_id);
  add_texts(response, reply.texts);
  if (reply.scores) {
    auto* tensor = response.add_outputs();
    tensor->set_name("scores");
    tensor->set_datatype("FP32");
    tensor->add_shape(static_cast<int64_t>(reply.scores->size()));
    for (const float score : *reply.scores) tensor->mutable_contents()->add_fp32_contents(score);
  }
  if (reply.partial) return response;
  const protocol::Timings& t = reply.timings;
  const std::pair<const char*, uint64_t> timings[] = {
      {"queue", t.queue_us},   {"tokenize", t.tokenize_us}, {"batch_wait", t.batch_wait_us},
      {"encode", t.encode_us}, {"decode", t.decode_us},     {"postprocess", t.postprocess_us},
      {"total", t.total_us}};
  for (const auto& [stage, us] : timings) {
    (*response.mutable_parameters())[std::string("timings_us.") + stage].set_int64_param(
        static_cast<int64_t>(us));
  }
  return response;
}

std::variant<inference::ModelInferResponse, grpc::Status> kserve_grpc_reply(
    std::string_view msgpack_reply, const std::string& client_id, const ResponseModel& model) {
  return kserve_grpc_reply(read_reply(msgpack_reply), client_id, model);
}

KserveStreamReply kserve_grpc_stream_reply(const protocol::Reply& partial_or_final,
                                           const std::string& client_id, const ResponseModel& model,
                                           bool streamed) {
  KserveStreamReply out;
  if (streamed && partial_or_final.partial && partial_or_final.texts.size() == 1) {
    out.final = false;
    auto& response = *out.response.mutable_infer_response();
    response.set_model_name(model.name);
    response.set_model_version(model.version);
    response.set_id(client_id);
    add_texts(response, partial_or_final.texts);
    (*response.mutable_parameters())[kFinalResponse].set_bool_param(false);
    return out;
  }
  auto reply = kserve_grpc_reply(partial_or_final, client_id, model);
  if (auto* status = std::get_if<grpc::Status>(&reply)) {
    out.response = kserve_grpc_stream_error(*status, client_id, model);
    return out;
  }
  auto& response = *out.response.mutable_infer_response();
  response = std::move(std::get<inference::ModelInferResponse>(reply));
  if (streamed && response.outputs_size() > 0 &&
      response.outputs(0).contents().bytes_contents_size() == 1)
    response.mutable_outputs(0)->mutable_contents()->set_bytes_contents(0, "");
  (*response.mutable_parameters())[kFinalResponse].set_bool_param(true);
  return out;
}

KserveStreamReply kserve_grpc_stream_reply(std::string_view msgpack_reply,
                                           const std::string& client_id, const ResponseModel& model,
                                           bool streamed) {
  return kserve_grpc_stream_reply(read_reply(msgpack_reply), client_id, model, streamed);
}

inference::ModelStreamInferResponse kserve_grpc_stream_error(const grpc::Status& status,
                                                             const std::string& client_id,
                                                             const ResponseModel& model) {
  inference::ModelStreamInferResponse out;
  out.set_error_message(status.error_message());
  auto& response = *out.mutable_infer_response();
  response.set_model_name(model.name);
  response.set_model_version(model.version);
  response.set_id(client_id);
  (*response.mutable_parameters())[kFinalResponse].set_bool_param(true);
  return out;
}

inference::ModelMetadataResponse kserve_grpc_metadata(const config::ModelCatalog& catalog,
                                                      const std::string& name,
                                                      std::optional<uint32_t> version) {
  const json metadata = json::parse(kserve_model_metadata(catalog, name, version));
  inference::ModelMetadataResponse out;
  out.set_name(metadata.at("name").get<std::string>());
  for (const json& v : metadata.at("versions")) out.add_versions(v.get<std::string>());
  out.set_platform(metadata.at("platform").get<std::string>());
  for (const char* kind : {"inputs", "outputs"}) {
    for (const json& t : metadata.at(kind)) {
      auto* tensor = std::string_view(kind) == "inputs" ? out.add_inputs() : out.add_outputs();
      tensor->set_name(t.at("name").get<std::string>());
      tensor->set_datatype(t.at("datatype").get<std::string>());
      for (const json& d : t.at("shape")) tensor->add_shape(d.get<int64_t>());
    }
  }
  return out;
}

}  // namespace seqpipe::gateway
