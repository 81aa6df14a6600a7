#pragma once
// The one exception the engine throws: at load time for a bad checkpoint or config (the message
// names the file, tensor or key at fault), and on the serving path for a bad request (empty input,
// token id outside the vocabulary, invalid decoding options, input longer than the cache, no free
// slots). Nothing in the engine aborts on request data; the services turn this into error replies.
#include <stdexcept>
#include <string>

namespace seqpipe::engine {

class EngineError : public std::runtime_error {
 public:
  explicit EngineError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace seqpipe::engine
