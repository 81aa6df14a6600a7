#include "seqpipe/engine/compute_type.h"

#include <array>
#include <string>
#include <utility>

#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

namespace {
constexpr std::array<std::pair<ComputeType, std::string_view>, 6> kNames = {{
    {ComputeType::kAuto, "auto"},
    {ComputeType::kFloat32, "float32"},
    {ComputeType::kFloat16, "float16"},
    {ComputeType::kBFloat16, "bfloat16"},
    {ComputeType::kInt8, "int8"},
    {ComputeType::kInt8BFloat16, "int8_bfloat16"},
}};
}  // namespace

std::string_view compute_type_name(ComputeType type) {
  for (const auto& [t, name] : kNames) {
    if (t == type) return name;
  }
  return "?";
}

ComputeType parse_compute_type(std::string_view name) {
  for (const auto& [t, n] : kNames) {
    if (n == name) return t;
  }
  throw EngineError("unknown compute type '" + std::string(name) +
                    "' (float32, bfloat16, int8, int8_bfloat16 or auto)");
}

}  // namespace seqpipe::engine
