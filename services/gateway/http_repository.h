#pragma once
// The KServe v2 model repository extension (Triton's) on the HTTP front door:
// POST /v2/repository/index, POST /v2/repository/models/<name>/load and .../unload. The gateway
// does not start or stop processes: each call is passed to the supervisor (`seqpipe up`) on its
// control socket (model_control), on a thread of its own, as a load waits for the new version's
// replicas to warm up.
#include <condition_variable>
#include <deque>
#include <functional>
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

// Asks the supervisor on a thread of its own, one call at a time, and hands each answer to its
// callback on that thread.
class RepositoryClient {
 public:
  RepositoryClient(zmq::context_t& context, std::string endpoint, std::chrono::milliseconds wait);
  ~RepositoryClient();
  RepositoryClient(const RepositoryClient&) = delete;
  RepositoryClient& operator=(const RepositoryClient&) = delete;
  void ask(model_control::ControlRequest request,
           std::function<void(model_control::ControlReply)> done);

 private:
  void loop();
  zmq::context_t& context_;
  std::string endpoint_;
  std::chrono::milliseconds wait_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<
      std::pair<model_control::ControlRequest, std::function<void(model_control::ControlReply)>>>
      calls_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace seqpipe::gateway
