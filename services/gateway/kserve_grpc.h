#pragma once
// KServe v2 over gRPC as the client protocol: the Open Inference Protocol's messages
// (proto/grpc_predict_v2.proto) in and out. A ModelInferRequest becomes the KServe v2 JSON
// request and goes through the one tensor mapping HTTP's /v2/models/<name>/infer uses
// (json_body.h), so both doors take the same tensors and parameters and refuse the same things.
// Pure functions: tested without sockets (grpc_front_door.h serves them).
#include <grpcpp/support/status.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "gateway/http_json.h"
#include "grpc_predict_v2.pb.h"
#include "seqpipe/config/model_repository.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::gateway {

// The gRPC status code of an error reply's code; the one place codes map to gRPC. The status's
// message keeps the protocol's code in front ("too_long: texts[0] ...").
grpc::StatusCode grpc_code(protocol::ErrorCode code);

// OK when `name` is the model this gateway serves, else NOT_FOUND naming both.
grpc::Status check_model(const std::string& name, const std::string& model_name);

// A call's model_version: empty (nullopt: the highest served) or a version number; else
// INVALID_ARGUMENT.
std::variant<std::optional<uint32_t>, grpc::Status> kserve_grpc_version(const std::string& version);

// The model version a call names in `catalog`: model_name (empty, with a repository: the default
// model) and model_version (empty: the name's highest), found as every door finds one
// (config::ModelCatalog::find). Else NOT_FOUND with the catalog's message (without a repository,
// a name other than its one model's is check_model's, as it always was), or INVALID_ARGUMENT.
std::variant<config::ModelVersion, grpc::Status> kserve_grpc_model(
    const config::ModelCatalog& catalog, const std::string& name, const std::string& version);

// The model a response names: model_name and model_version.
struct ResponseModel {
  std::string name;
  std::string version;
};

// A ModelInferRequest as the gateway's request, or INVALID_ARGUMENT saying why not. One BYTES
// input tensor of texts, in `contents.bytes_contents` or in `raw_input_contents` (each element
// a 4-byte little-endian length and its bytes); `parameters` are the generation params and
// timeout_ms, as over HTTP. model_name and model_version (when not empty) are the request's
// model and version, which the gateway resolves, as it does HTTP's KServe path's. `deadline_ms`:
// what is left of the call's gRPC deadline, when it has one: it becomes the request's timeout_ms
// (the smaller, when the parameters name one too).
// `stream` (ModelStreamInfer): a request of one text goes as a streamed one (kserve_infer_json).
std::variant<HttpRequest, grpc::Status> kserve_grpc_request(
    const inference::ModelInferRequest& request, const std::string& internal_id,
    std::optional<uint32_t> deadline_ms, bool stream = false);

// The gateway's reply as a ModelInferResponse naming `model` (a BYTES "text" output, FP32
// "scores" when asked, each timing as an int64 parameter "timings_us.<stage>"), or its error as a
// gRPC status.
std::variant<inference::ModelInferResponse, grpc::Status> kserve_grpc_reply(
    const protocol::Reply& reply, const std::string& client_id, const ResponseModel& model);
std::variant<inference::ModelInferResponse, grpc::Status> kserve_grpc_reply(
    std::string_view msgpack_reply, const std::string& client_id, const ResponseModel& model);

// The parameter every ModelStreamInfer response carries, as Triton's decoupled models do: true
// on a request's last response.
inline constexpr const char* kFinalResponse = "triton_final_response";

// One reply to a ModelStreamInfer request as its response. A partial reply: a response whose
// BYTES "text" holds what the text gained. The final reply: kserve_grpc_reply's response, its
// "text" emptied when the request was `streamed` (the partials carried all of it), so the texts
// of a request's responses concatenate to the text ModelInfer answers. An error: error_message.
struct KserveStreamReply {
  inference::ModelStreamInferResponse response;
  bool final = true;  // no more responses to this request follow
};
KserveStreamReply kserve_grpc_stream_reply(const protocol::Reply& reply,
                                           const std::string& client_id, const ResponseModel& model,
                                           bool streamed);
KserveStreamReply kserve_grpc_stream_reply(std::string_view msgpack_reply,
                                           const std::string& client_id, const ResponseModel& model,
                                           bool streamed);
// A ModelStreamInfer request's error as its (final) response: error_message, and the request's
// id and model in infer_response, so a client with several requests on the stream knows which.
inference::ModelStreamInferResponse kserve_grpc_stream_error(const grpc::Status& status,
                                                             const std::string& client_id,
                                                             const ResponseModel& model);

// GET /v2/models/<name>[/versions/<v>]'s metadata (kserve_model_metadata), as the gRPC message.
inference::ModelMetadataResponse kserve_grpc_metadata(const config::ModelCatalog& catalog,
                                                      const std::string& name,
                                                      std::optional<uint32_t> version);

}  // namespace seqpipe::gateway
