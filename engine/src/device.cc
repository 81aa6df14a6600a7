#include "seqpipe/engine/device.h"

#include <charconv>

#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

DeviceSpec parse_device(std::string_view text) {
  if (text == "cpu") return {Device::kCpu, 0};
  if (text == "cuda") return {Device::kCuda, 0};
  constexpr std::string_view kCudaPrefix = "cuda:";
  if (text.starts_with(kCudaPrefix)) {
    const std::string_view digits = text.substr(kCudaPrefix.size());
    int index = -1;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (!digits.empty() && error == std::errc() && end == digits.data() + digits.size() &&
        index >= 0) {
      return {Device::kCuda, index};
    }
  }
  throw EngineError("unknown device '" + std::string(text) + "' (cpu, cuda or cuda:N)");
}

std::string device_string(const DeviceSpec& spec) {
  if (spec.device == Device::kCpu) return "cpu";
  return "cuda:" + std::to_string(spec.index);
}

}  // namespace seqpipe::engine
