#pragma once
// Errors the engine raises at load time (bad checkpoint, bad config, bad options).
// The message always names the file, tensor or key at fault.
#include <stdexcept>
#include <string>

namespace seqpipe::engine {

class EngineError : public std::runtime_error {
 public:
  explicit EngineError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace seqpipe::engine
