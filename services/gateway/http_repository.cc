#include "gateway/http_repository.h"

#include <nlohmann/json.hpp>

#include "gateway/json_body.h"

namespace seqpipe::gateway {
namespace {

constexpr std::string_view kIndex = "/v2/repository/index";
constexpr std::string_view kModels = "/v2/repository/models/";

HttpAnswer error_answer(int status, const std::string& message) {
  return {.status = status, .body = nlohmann::json{{"error", message}}.dump()};
}

// parameters.version of a load or unload body: a number or a numeric string.
std::variant<std::optional<int>, HttpAnswer> version_of(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return std::optional<int>{};
  const auto json = parse_object(body);
  if (!json) return error_answer(400, "the body must be a JSON object");
  const auto parameters = json->find("parameters");
  if (parameters == json->end() || !parameters->is_object()) return std::optional<int>{};
  const auto version = parameters->find("version");
  if (version == parameters->end()) return std::optional<int>{};
  if (version->is_number_unsigned() && version->get<uint64_t>() < (1u << 30))
    return std::optional<int>(version->get<int>());
  if (version->is_string()) {
    const std::string text = version->get<std::string>();
    if (!text.empty() && text.size() < 10 && text.find_first_not_of("0123456789") == text.npos)
      return std::optional<int>(std::stoi(text));
  }
  return error_answer(400, "parameters.version must be a version number, got " + version->dump());
}

}  // namespace

bool is_repository_path(std::string_view path) {
  return path == kIndex || path.starts_with(kModels);
}

std::variant<model_control::ControlRequest, HttpAnswer> repository_request(std::string_view path,
                                                                           std::string_view body) {
  using model_control::Op;
  if (path == kIndex) return model_control::ControlRequest{Op::kIndex, "", std::nullopt};
  std::string_view rest = path.substr(kModels.size());
  const size_t slash = rest.find('/');
  const std::string_view action = slash == rest.npos ? "" : rest.substr(slash + 1);
  if (action != "load" && action != "unload")
    return error_answer(404, "no such repository call: " + std::string(path));
  const std::string name(rest.substr(0, slash));
  if (!config::valid_model_name(name)) return error_answer(400, "not a model name: '" + name + "'");
  auto version = version_of(body);
  if (auto* answer = std::get_if<HttpAnswer>(&version)) return *answer;
  return model_control::ControlRequest{action == "load" ? Op::kLoad : Op::kUnload, name,
                                       std::get<std::optional<int>>(version)};
}

HttpAnswer repository_answer(const model_control::ControlRequest& request,
                             const model_control::ControlReply& reply) {
  if (reply.error) return error_answer(http_status(reply.error->code), reply.error->message);
  if (request.op != model_control::Op::kIndex) return {.status = 200, .body = "{}"};
  nlohmann::json index = nlohmann::json::array();
  for (const auto& m : reply.models) {
    index.push_back({{"name", m.name},
                     {"version", m.version > 0 ? std::to_string(m.version) : ""},
                     {"state", model_control::state_name(m.state)},
                     {"reason", m.reason}});
  }
  return {.status = 200, .body = index.dump()};
}

RepositoryClient::RepositoryClient(zmq::context_t& context, std::string endpoint,
                                   std::chrono::milliseconds wait)
    : context_(context), endpoint_(std::move(endpoint)), wait_(wait) {
  thread_ = std::thread([this] { loop(); });
}

RepositoryClient::~RepositoryClient() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void RepositoryClient::ask(model_control::ControlRequest request,
                           std::function<void(model_control::ControlReply)> done) {
  {
    std::lock_guard lock(mutex_);
    calls_.emplace_back(std::move(request), std::move(done));
  }
  wake_.notify_one();
}

void RepositoryClient::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !calls_.empty(); });
    if (stopping_) return;
    auto [request, done] = std::move(calls_.front());
    calls_.pop_front();
    lock.unlock();
    done(model_control::ask_supervisor(context_, endpoint_, request, wait_));
    lock.lock();
  }
}

}  // namespace seqpipe::gateway
