#include "gateway/http_deadline.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace seqpipe::gateway {

std::variant<std::optional<uint32_t>, HttpAnswer> request_timeout(const char* value) {
  if (value == nullptr) return std::nullopt;
  const std::string_view text(value);
  uint64_t ms = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || ms > UINT32_MAX)
    return kserve_error(400, std::string(kRequestTimeoutHeader) +
                                 " must be a whole number of milliseconds (1.."
                                 "gateway.max_timeout_ms), got '" +
                                 std::string(text.substr(0, 32)) + "'");
  return static_cast<uint32_t>(ms);
}

void set_timeout(HttpRequest& request, uint32_t timeout_ms) {
  request.fields["timeout_ms"] = timeout_ms;
  request.timeout_ms = timeout_ms;
}

}  // namespace seqpipe::gateway
