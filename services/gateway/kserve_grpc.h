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
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::gateway {

// The gRPC status code of an error reply's code; the one place codes map to gRPC. The status's
// message keeps the protocol's code in front ("too_long: texts[0] ...").
grpc::StatusCode grpc_code(protocol::ErrorCode code);

// OK when `name` is the model this gateway serves, else NOT_FOUND naming both.
grpc::Status check_model(const std::string& name, const std::string& model_name);

// A ModelInferRequest as the gateway's request, or INVALID_ARGUMENT saying why not. One BYTES
// input tensor of texts, in `contents.bytes_contents` or in `raw_input_contents` (each element
// a 4-byte little-endian length and its bytes); `parameters` are the generation params and
// timeout_ms, as over HTTP. `deadline_ms`: what is left of the call's gRPC deadline, when it has
// one: it becomes the request's timeout_ms (the smaller, when the parameters name one too).
// `stream` (ModelStreamInfer): a request of one text goes as a streamed one (kserve_infer_json).
std::variant<HttpRequest, grpc::Status> kserve_grpc_request(
    const inference::ModelInferRequest& request, const std::string& internal_id,
    std::optional<uint32_t> deadline_ms, bool stream = false);

// The gateway's reply as a ModelInferResponse (a BYTES "text" output, FP32 "scores" when asked,
// each timing as an int64 parameter "timings_us.<stage>"), or its error as a gRPC status.
std::variant<inference::ModelInferResponse, grpc::Status> kserve_grpc_reply(
    std::string_view msgpack_reply, const std::string& client_id, const std::string& model_name);

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
KserveStreamReply kserve_grpc_stream_reply(std::string_view msgpack_reply,
                                           const std::string& client_id,
                                           const std::string& model_name, bool streamed);
// A ModelStreamInfer request's error as its (final) response: error_message, and the request's
// id and model in infer_response, so a client with several requests on the stream knows which.
inference::ModelStreamInferResponse kserve_grpc_stream_error(const grpc::Status& status,
                                                             const std::string& client_id,
                                                             const std::string& model_name);

// GET /v2/models/<name>'s metadata, as the gRPC message.
inference::ModelMetadataResponse kserve_grpc_metadata(const std::string& model_name);

}  // namespace seqpipe::gateway
