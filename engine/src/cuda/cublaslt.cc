#include "cuda/cublaslt.h"

#include <dlfcn.h>

#include <string>

#include "seqpipe/engine/error.h"

namespace seqpipe::engine::cuda {

namespace {

// By soname (the executable's runpath names the toolkit's library folder), else by the path
// CMake found the toolkit at.
void* open_library() {
  for (const char* name : {SEQPIPE_CUBLASLT_SONAME, SEQPIPE_CUBLASLT_PATH}) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
  }
  const char* why = dlerror();
  throw EngineError(std::string("cuda: cannot load ") + SEQPIPE_CUBLASLT_SONAME + ": " +
                    (why != nullptr ? why : "not found"));
}

template <typename Function>
void bind(void* library, const char* name, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, name));
  if (function == nullptr)
    throw EngineError(std::string("cuda: ") + SEQPIPE_CUBLASLT_SONAME + " has no " + name);
}

CublasLt load() {
  void* library = open_library();  // kept open for the process's life
  CublasLt lt{};
  bind(library, "cublasLtCreate", lt.create);
  bind(library, "cublasLtMatmulDescCreate", lt.matmul_desc_create);
  bind(library, "cublasLtMatmulDescSetAttribute", lt.matmul_desc_set_attribute);
  bind(library, "cublasLtMatrixLayoutCreate", lt.matrix_layout_create);
  bind(library, "cublasLtMatmulPreferenceCreate", lt.preference_create);
  bind(library, "cublasLtMatmulPreferenceSetAttribute", lt.preference_set_attribute);
  bind(library, "cublasLtMatmulPreferenceDestroy", lt.preference_destroy);
  bind(library, "cublasLtMatmulAlgoGetHeuristic", lt.algo_get_heuristic);
  bind(library, "cublasLtMatmul", lt.matmul);
  return lt;
}

}  // namespace

const CublasLt& CublasLt::get() {
  static const CublasLt lt = load();  // a throw leaves it unset: the next call tries again
  return lt;
}

}  // namespace seqpipe::engine::cuda
