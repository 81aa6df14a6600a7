// libFuzzer target: the internal stage message decoder every service runs on what its peers
// send. Any bytes must decode to a message or an Error without crashing, and a message must
// survive a round trip unchanged. The input is the header, tried alone and followed by one and by
// two tensor frames (the input's halves: encoded items take them, other messages refuse them).
#include <cstdint>
#include <cstdlib>
#include <span>
#include <variant>
#include <vector>

#include "seqpipe/messages/stage_messages.h"
#include "seqpipe/observability/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace seqpipe;
  const stage::Limits limits;
  const stage::TensorFrame halves[] = {{nullptr, {data, size / 2}},
                                       {nullptr, {data + size / 2, size - size / 2}}};
  for (size_t frames = 0; frames <= 2; ++frames) {
    auto decoded =
        stage::decode(std::span<const uint8_t>(data, size), std::span(halves, frames), limits);
    if (auto* message = std::get_if<stage::StageMessage>(&decoded)) {
      const std::string again = stage::encode(*message);
      std::vector<stage::TensorFrame> tensors;
      stage::append_frames(*message, tensors);
      auto round = stage::decode(again, tensors, limits);
      if (!std::holds_alternative<stage::StageMessage>(round) ||
          !(std::get<stage::StageMessage>(round) == *message)) {
        std::abort();
      }
    }
  }
  (void)status::decode(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
