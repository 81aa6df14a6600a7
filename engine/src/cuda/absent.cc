// The CUDA entry points of a build without the CUDA toolkit (SEQPIPE_WITH_CUDA=OFF, or AUTO where
// CMake found no toolkit): asking for a GPU is a clear error, not a link failure.
#include "backend.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine::cuda {

Backend& open(int index) {
  throw EngineError("device cuda:" + std::to_string(index) +
                    ": this build has no CUDA backend (configure with the CUDA toolkit in "
                    "/usr/local/cuda and SEQPIPE_WITH_CUDA=AUTO or ON)");
}

Backend* opened() {
  return nullptr;
}

}  // namespace seqpipe::engine::cuda
