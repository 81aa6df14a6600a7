#pragma once
// The gateway's HTTP bodies as the client protocol: JSON in, the request's fields for the gateway;
// the gateway's reply in, read once as a typed protocol::Reply (read_reply), JSON out, for POST
// /v1/generate and KServe v2 infer. Pure functions: tested and fuzzed without sockets
// (http_front_door.h serves them). Each reply writer also takes the reply's msgpack bytes (read
// with read_reply), for tests and fuzzers.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "seqpipe/config/model_repository.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::gateway {

// The HTTP status of an error reply's code; the one place codes map to HTTP.
int http_status(protocol::ErrorCode code);
// An error reply's code (an error reply without one is a server bug: internal).
protocol::ErrorCode error_code(const protocol::Reply& reply);

// The one point a door reads the gateway's reply: the typed reply, or (for bytes that are not
// one) an internal error reply "undecodable reply", which each door answers as its own internal
// error. `id`: that error reply's.
protocol::Reply read_reply(std::string_view msgpack_reply, const std::string& id = "");

// A request translated for the gateway: the msgpack request's fields, as JSON, carrying
// `internal_id` as the id (a door's tag: a cancel names it), made typed by json_request.h's
// validator; and what the reply needs back.
struct HttpRequest {
  nlohmann::json fields;
  size_t message_bytes = 0;  // the body (gRPC: the message) it came in: max_message_bytes applies
  std::string internal_id;   // the id the gateway sees and answers with
  std::string client_id;     // the JSON's "id" ("" when absent), echoed in the reply
  std::optional<uint32_t> timeout_ms;  // the request's own, for how long to wait
  bool stream = false;                 // "stream": true: answered as server-sent events
  // OpenAI requests (http_openai.h): a chat completion rather than a completion, and when the
  // request was made (every chunk of a stream carries the same "created").
  bool chat = false;
  int64_t created = 0;
  // A streamed OpenAI request's stream_options.include_usage: a usage chunk before [DONE].
  bool include_usage = false;
  // A TGI request's parameters.details: the reply (a stream's last event) carries details.
  bool details = false;
  // The model the request named (KServe's path), for its reply; empty: the default model.
  std::string model;
};
// An HTTP answer: status and JSON body.
struct HttpAnswer {
  int status = 200;
  std::string body;
  std::string allow = {};  // a 405's Allow header: the methods the path takes
};

// /v1/generate: a JSON object with the msgpack request's fields ("v" may be left out); a body
// that is not a JSON object is an invalid_argument answer. Field checks are the gateway's.
std::variant<HttpRequest, HttpAnswer> generate_request(std::string_view body,
                                                       const std::string& internal_id);
// The gateway's reply as /v1/generate's JSON reply (the msgpack reply's fields as JSON), with the
// client's id.
HttpAnswer generate_reply(const protocol::Reply& reply, const std::string& client_id);
HttpAnswer generate_reply(std::string_view msgpack_reply, const std::string& client_id);
// One reply of a streamed request (partial or final) as a server-sent event: "data: " and its
// JSON (generate_reply's body, one line), then a blank line.
std::string sse_event(const protocol::Reply& reply, const std::string& client_id);
std::string sse_event(std::string_view msgpack_reply, const std::string& client_id);

// KServe v2 infer: one BYTES input tensor of texts (shape [N] or [N, 1]); "parameters" carries
// the generation params by their protocol names, and timeout_ms.
// With `model`: the request runs that model (and `version`, when given).
std::variant<HttpRequest, HttpAnswer> kserve_infer_request(
    std::string_view body, const std::string& internal_id,
    const std::optional<std::string>& model = std::nullopt,
    std::optional<uint32_t> version = std::nullopt);
// The model and version a KServe model path names: /v2/models/<name>[/versions/<v>]<suffix>
// (suffix "/infer", "/ready" or ""); nullopt for another path (or a version that is not a
// positive number).
struct KserveModelPath {
  std::string name;
  std::optional<uint32_t> version;
};
std::optional<KserveModelPath> kserve_model_path(std::string_view path, std::string_view suffix);
// The reply as a KServe v2 infer response (a BYTES "text" output, FP32 "scores" when asked), or
// {"error": "..."} with the code's HTTP status.
HttpAnswer kserve_infer_reply(const protocol::Reply& reply, const std::string& client_id,
                              const std::string& model_name);
HttpAnswer kserve_infer_reply(std::string_view msgpack_reply, const std::string& client_id,
                              const std::string& model_name);
// A model's metadata (GET /v2/models/<name>[/versions/<v>], gRPC's ModelMetadata): its name,
// and as its versions `version` when one is named, else every version of it `catalog` serves.
std::string kserve_model_metadata(const config::ModelCatalog& catalog, const std::string& name,
                                  std::optional<uint32_t> version);
// A KServe v2 error answer: {"error": message} with `status`.
HttpAnswer kserve_error(int status, const std::string& message);

// The answer to a request no route took, saying what was wrong: a path served with another
// method is 405 with Allow; a model other than `model_name` under /v2/models/ is 404 naming both;
// any other path is 404 naming it and the routes there are.
HttpAnswer unrouted_request(std::string_view method, std::string_view path,
                            const std::string& model_name);

}  // namespace seqpipe::gateway
