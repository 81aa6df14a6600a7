// libFuzzer target: the internal stage message decoder every service runs on what its peers
// send. Any bytes must decode to a message or an Error without crashing, and a message must
// survive a round trip unchanged.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <variant>

#include "seqpipe/messages/stage_messages.h"
#include "seqpipe/observability/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace seqpipe;
  const stage::Limits limits;
  auto decoded = stage::decode(std::span<const uint8_t>(data, size), limits);
  if (auto* message = std::get_if<stage::StageMessage>(&decoded)) {
    const std::string again = stage::encode(*message);
    auto round = stage::decode(again, limits);
    if (!std::holds_alternative<stage::StageMessage>(round) ||
        !(std::get<stage::StageMessage>(round) == *message)) {
      std::abort();
    }
  }
  (void)status::decode(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
