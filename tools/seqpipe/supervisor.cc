#include "seqpipe/supervisor.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iterator>

namespace seqpipe::supervisor {

std::string Exit::describe() const {
  return (signaled ? "signal " : "status ") + std::to_string(code);
}

Decision RestartTracker::exited(const Exit& exit, Clock::time_point now) {
  if (!exit.signaled && exit.code == kBadConfigStatus)
    return {.give_up = true,
            .restart_at = {},
            .reason = "exited with " + exit.describe() + " (bad usage or config)"};
  const bool quick = now - started_at_ < policy_.quick_exit;
  quick_exits_ = quick ? quick_exits_ + 1 : 0;
  if (quick_exits_ >= policy_.start_limit) {
    return {.give_up = true,
            .restart_at = {},
            .reason = "exited " + std::to_string(quick_exits_) +
                      " times in a row right after starting, last with " + exit.describe()};
  }
  // first_pause for a child that ran fine, doubling with each quick exit in a row.
  std::chrono::milliseconds pause = policy_.first_pause;
  for (int i = 1; i < quick_exits_ && pause < policy_.max_pause; ++i) pause *= 2;
  return {.give_up = false, .restart_at = now + std::min(pause, policy_.max_pause), .reason = ""};
}

std::vector<std::string> check_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {"model.dir: '" + dir + "' is not a directory"};
  std::vector<std::string> problems;
  for (const char* file : {"config.json", "model.safetensors", "spiece.model"}) {
    if (!fs::is_regular_file(fs::path(dir) / file, ec))
      problems.push_back("model.dir: '" + dir + "' has no " + file);
  }
  return problems;
}

std::vector<WorkerSpec> worker_specs(const config::PipelineConfig& c,
                                     const std::vector<config::ModelVersion>& models) {
  const std::pair<const char*, int> stages[] = {{"tokenizer", c.tokenizer.replicas},
                                                {"encoder", c.encoder.replicas},
                                                {"decoder", c.decoder.replicas},
                                                {"postprocessor", c.postprocessor.replicas}};
  std::vector<WorkerSpec> specs;
  for (const auto& [stage, replicas] : stages) {
    int replica = 0;
    if (c.model.repository.empty()) {
      for (int i = 0; i < replicas; ++i) specs.push_back({stage, replica++, {}});
      continue;
    }
    for (const config::ModelVersion& m : models) {
      for (int i = 0; i < replicas; ++i) {
        specs.push_back({stage, replica++, config::model_version_overrides(m)});
      }
    }
  }
  return specs;
}

std::string set_openmp_waits(const config::PipelineConfig& config, int cores) {
  if (config::engine_threads_oversubscribe(config, cores) && !config::openmp_wait_chosen()) {
    ::setenv(config::kOversubscribedOpenMpWait.name, config::kOversubscribedOpenMpWait.value, 1);
  }
  std::string waits;
  for (const char* name : config::kOpenMpWaitVariables) {
    const char* value = std::getenv(name);
    if (!value) continue;
    if (!waits.empty()) waits += ' ';
    waits.append(name).append("=").append(value);
  }
  return waits.empty() ? "libgomp's default" : waits;
}

}  // namespace seqpipe::supervisor
