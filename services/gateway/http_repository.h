#pragma once
// The KServe v2 model repository extension (Triton's) on the HTTP front door:
// POST /v2/repository/index, POST /v2/repository/models/<name>/load and .../unload. The gateway
// does not start or stop processes: each call is passed to the supervisor (`seqpipe up`) on its
// control socket (model_control), on a thread of its own, as a load waits for the new version's
// replicas to warm up; calls do not wait for one another (an index is not held up by a load).
// Who may call: only clients of a loopback HTTP endpoint unless gateway.repository_api_public,
// and with gateway.repository_token_file only those carrying its bearer token.
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <zmq.hpp>

#include "gateway/http_json.h"
#include "seqpipe/runtime/model_control.h"

namespace seqpipe::gateway {

// Whether `path` is the repository extension's (a POST to it is answered here).
bool is_repository_path(std::string_view path);
// The control request a repository call asks for, or its error answer (400, 404). A load or
// unload body may give {"parameters": {"version": N}} (N a number or a numeric string): that
// version only.
std::variant<model_control::ControlRequest, HttpAnswer> repository_request(std::string_view path,
                                                                           std::string_view body);
// The supervisor's reply as the extension's answer: the index as
// [{"name", "version", "state", "reason"}], a load or unload as 200 {} or the error as
// {"error": message} with its code's status.
HttpAnswer repository_answer(const model_control::ControlRequest& request,
                             const model_control::ControlReply& reply);

// Whether an Authorization header value (null: none) carries `token` as "Bearer <token>".
// Constant time in the token's bytes: both sides are hashed and the hashes compared with
// libsodium's sodium_memcmp, so neither a prefix nor the length shows in the timing.
bool bearer_token_matches(const char* authorization, const std::string& token);
// Why a repository call is refused, or nullopt when it may go on: 403 when the extension is not
// `served` here (naming gateway.repository_api_public), 401 when `token` is set and
// `authorization` (the header's value, null when absent) does not carry it.
std::optional<HttpAnswer> repository_refusal(bool served, const std::string& token,
                                             const char* authorization);
// The token a gateway.repository_token_file holds (its first line, surrounding blanks dropped);
// throws config::ConfigError naming the key when it cannot be read or is under 16 characters.
std::string read_repository_token(const std::string& path);

// Asks the supervisor, each call on a thread of its own (a slow load holds up no other call),
// and hands each answer to its callback on that thread.
class RepositoryClient {
 public:
  // Calls in flight at once: a client asking for more is answered 503 at once.
  static constexpr size_t kMaxCalls = 8;

  RepositoryClient(zmq::context_t& context, std::string endpoint, std::chrono::milliseconds wait);
  ~RepositoryClient();  // waits for the calls in flight (each within `wait`)
  RepositoryClient(const RepositoryClient&) = delete;
  RepositoryClient& operator=(const RepositoryClient&) = delete;
  // False (and `done` never called) when kMaxCalls calls are in flight.
  bool ask(model_control::ControlRequest request,
           std::function<void(model_control::ControlReply)> done);

 private:
  struct Call {
    std::thread thread;
    bool finished = false;  // its answer is handed over: the thread may be joined
  };
  zmq::context_t& context_;
  std::string endpoint_;
  std::chrono::milliseconds wait_;
  std::mutex mutex_;  // guards calls_
  std::list<Call> calls_;
};

}  // namespace seqpipe::gateway
