// Opens the GPU through the CUDA backend module (src/cuda/backend.cu, built as
// libseqpipe_engine_cuda.so): loaded on the first open(), so a process that runs on the CPU maps
// no CUDA library. Their thread-local storage (cudart's 4 KB, cuBLASLt's 94 KB) would sit in every
// thread's stack, and Debian's civetweb (each service's /metrics) starts its threads with 100 KB
// stacks, which, beside OpenBLAS's 60 KB, then fail to start. The module calls back into the
// engine (the executables export its symbols: -rdynamic).
#include <dlfcn.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine::cuda {

namespace {

using OpenFunction = Backend* (*)(int index);

// Beside the executable first (a build carried to another machine keeps the module with its
// programs), then where the build wrote it.
OpenFunction load_module() {
  std::vector<std::string> paths;
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) paths.push_back((exe.parent_path() / SEQPIPE_CUDA_MODULE_NAME).string());
  paths.emplace_back(SEQPIPE_CUDA_MODULE);
  std::string why;
  for (const std::string& path : paths) {
    if (!std::filesystem::exists(path)) continue;
    void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept for the process's life
    if (module == nullptr) {
      why += std::string(dlerror()) + "; ";
      continue;
    }
    if (auto open = reinterpret_cast<OpenFunction>(dlsym(module, "seqpipe_cuda_open"))) return open;
    why += path + " has no seqpipe_cuda_open; ";
  }
  throw EngineError(
      std::string("cuda: cannot load the CUDA backend ") + SEQPIPE_CUDA_MODULE_NAME + " (" +
      (why.empty() ? std::string("not beside the program nor at ") + SEQPIPE_CUDA_MODULE : why) +
      ")");
}

std::mutex g_open_mutex;  // open() alone; opened() runs on every op and only loads
std::atomic<Backend*> g_backend{nullptr};
int g_index = -1;

}  // namespace

Backend& open(int index) {
  const std::lock_guard<std::mutex> lock(g_open_mutex);
  if (Backend* backend = g_backend.load()) {
    if (g_index == index) return *backend;
    throw EngineError("device cuda:" + std::to_string(index) + ": this process already uses cuda:" +
                      std::to_string(g_index) + " (one GPU per process)");
  }
  static const OpenFunction open_module = load_module();
  Backend* backend = open_module(index);
  g_index = index;
  g_backend.store(backend);
  return *backend;
}

Backend* opened() {
  return g_backend.load(std::memory_order_acquire);
}

}  // namespace seqpipe::engine::cuda
