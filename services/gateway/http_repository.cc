#include "gateway/http_repository.h"

#include <sodium.h>
#include <strings.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "gateway/json_body.h"
#include "seqpipe/config/config_error.h"
#include "seqpipe/config/model_repository.h"

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
  if (reply.more > 0) {  // a bounded answer says so, in the shape of its entries
    index.push_back({{"name", ""},
                     {"version", ""},
                     {"state", ""},
                     {"reason", std::to_string(reply.more) + " more entries not shown: an index " +
                                    "answer holds at most " +
                                    std::to_string(model_control::kMaxIndexEntries)}});
  }
  return {.status = 200, .body = index.dump()};
}

bool bearer_token_matches(const char* authorization, const std::string& token) {
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization == nullptr) return false;
  std::string_view given(authorization);
  if (given.size() < kScheme.size() ||
      strncasecmp(given.data(), kScheme.data(), kScheme.size()) != 0)
    return false;
  given.remove_prefix(kScheme.size());
  if (sodium_init() < 0) return false;  // the library cannot work: nobody is let in
  unsigned char a[crypto_generichash_BYTES], b[crypto_generichash_BYTES];
  crypto_generichash(a, sizeof a, reinterpret_cast<const unsigned char*>(given.data()),
                     given.size(), nullptr, 0);
  crypto_generichash(b, sizeof b, reinterpret_cast<const unsigned char*>(token.data()),
                     token.size(), nullptr, 0);
  return sodium_memcmp(a, b, sizeof a) == 0;
}

std::optional<HttpAnswer> repository_refusal(bool served, const std::string& token,
                                             const char* authorization) {
  if (!served) {
    return error_answer(403,
                        "the model repository API is not served beyond loopback: set "
                        "gateway.repository_api_public: true (with gateway.repository_token_file) "
                        "to serve it on this HTTP endpoint");
  }
  if (!token.empty() && !bearer_token_matches(authorization, token)) {
    return error_answer(401,
                        "the model repository API needs the bearer token of "
                        "gateway.repository_token_file (Authorization: Bearer <token>)");
  }
  return std::nullopt;
}

std::string read_repository_token(const std::string& path) {
  constexpr size_t kMinLength = 16;
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line))
    throw config::ConfigError("gateway.repository_token_file: " + path + " cannot be read");
  const size_t first = line.find_first_not_of(" \t\r");
  const size_t last = line.find_last_not_of(" \t\r");
  const std::string token = first == line.npos ? "" : line.substr(first, last - first + 1);
  if (token.size() < kMinLength)
    throw config::ConfigError("gateway.repository_token_file: " + path +
                              ": the token (its first line) must be at least " +
                              std::to_string(kMinLength) + " characters");
  return token;
}

RepositoryClient::RepositoryClient(zmq::context_t& context, std::string endpoint,
                                   std::chrono::milliseconds wait)
    : context_(context), endpoint_(std::move(endpoint)), wait_(wait) {}

RepositoryClient::~RepositoryClient() {
  std::list<Call> calls;
  {
    std::lock_guard lock(mutex_);
    calls.swap(calls_);
  }
  for (Call& call : calls) call.thread.join();
}

bool RepositoryClient::ask(model_control::ControlRequest request,
                           std::function<void(model_control::ControlReply)> done) {
  std::lock_guard lock(mutex_);
  for (auto it = calls_.begin(); it != calls_.end();) {  // the finished ones leave
    if (!it->finished) {
      ++it;
      continue;
    }
    it->thread.join();
    it = calls_.erase(it);
  }
  if (calls_.size() >= kMaxCalls) return false;
  auto call = calls_.emplace(calls_.end());
  // The thread marks its call finished under the lock this function holds: never before the
  // thread object is stored.
  call->thread = std::thread([this, call, request = std::move(request), done = std::move(done)] {
    done(model_control::ask_supervisor(context_, endpoint_, request, wait_));
    std::lock_guard finished(mutex_);
    call->finished = true;
  });
  return true;
}

}  // namespace seqpipe::gateway
