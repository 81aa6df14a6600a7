// libFuzzer target: the gateway's client request decoder. Any bytes must decode to a Request or
// a RejectedRequest without crashing, and a Request must survive a round trip unchanged.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <variant>

#include "seqpipe/protocol/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace seqpipe::protocol;
  const Limits limits;
  auto decoded = decode_request(std::span<const uint8_t>(data, size), limits);
  if (auto* request = std::get_if<Request>(&decoded)) {
    const std::string again = encode_request(*request);
    auto round = decode_request(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(again.data()), again.size()),
        limits);
    if (!std::holds_alternative<Request>(round) || std::get<Request>(round) != *request)
      std::abort();
  }
  // The client side too: replies are decoded by clients from a server they may not trust.
  (void)decode_reply(std::span<const uint8_t>(data, size));
  return 0;
}
