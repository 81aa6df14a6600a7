#pragma once
// How `seqpipe up` supervises its children, as systemd's Restart=always with a start limit: a
// child that exits is started again after a pause that doubles while it keeps failing; a child
// that cannot start (it exits with the bad-usage-or-config status, or keeps exiting right after
// each start) stops the whole pipeline with its error instead of crash-looping forever. A pure
// decision: time is passed in, so tests drive it without processes.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "seqpipe/config/config.h"
#include "seqpipe/config/model_repository.h"

namespace seqpipe::supervisor {

using Clock = std::chrono::steady_clock;

struct RestartPolicy {
  // Pause before the first restart; each quick exit in a row doubles it, up to max_pause.
  std::chrono::milliseconds first_pause{500};
  std::chrono::milliseconds max_pause{10000};
  // A child that exits sooner than this after its start failed to start; one that ran longer
  // started fine, and its next restart pauses first_pause again.
  std::chrono::milliseconds quick_exit{5000};
  // Quick exits in a row after which the child is given up (systemd's StartLimitBurst).
  int start_limit = 5;
};

// The exit status every seqpipe service uses for bad usage or a bad config: restarting with the
// same arguments cannot help.
inline constexpr int kBadConfigStatus = 2;

// How a child ended, as waitpid reported it.
struct Exit {
  bool signaled = false;
  int code = 0;  // the exit status, or the signal number when signaled
  std::string describe() const;
};

struct Decision {
  bool give_up = false;
  Clock::time_point restart_at{};  // when !give_up
  std::string reason;              // when give_up: why, for the error message
};

// One child's restart history.
class RestartTracker {
 public:
  RestartTracker() = default;
  explicit RestartTracker(RestartPolicy policy) : policy_(policy) {}

  void started(Clock::time_point now) { started_at_ = now; }
  // The child exited at `now`: when to start it again, or give up.
  Decision exited(const Exit& exit, Clock::time_point now);
  int quick_exits_in_a_row() const { return quick_exits_; }

 private:
  RestartPolicy policy_;
  Clock::time_point started_at_{};
  int quick_exits_ = 0;
};

// What `seqpipe up` checks before it starts anything: the model directory holds the files the
// stages load. Returns one message per problem (empty: fine).
std::vector<std::string> check_model_dir(const std::string& dir);

// One worker process `seqpipe up` starts: its stage and the --set assignments that tell it which
// model version it serves.
struct WorkerSpec {
  std::string stage;  // "tokenizer", "encoder", "decoder", "postprocessor"
  int replica = 0;    // of this stage, counted over every model version
  std::vector<std::string> sets;
};
// Without model.repository: each worker stage's `replicas` for model.dir. With it: that many of
// each stage for every version in `models` (a repository's scan), each told model.dir,
// model.name and model.version (so it loads that version's seqpipe.yaml and announces it).
std::vector<WorkerSpec> worker_specs(const config::PipelineConfig& c,
                                     const std::vector<config::ModelVersion>& models);

// The OpenMP wait of the children: when the engine stages' threads outnumber `cores`
// (config::engine_threads_oversubscribe) and the user set none (OMP_WAIT_POLICY, GOMP_SPINCOUNT),
// sets config::kOversubscribedOpenMpWait in this process's environment, which the children get
// (libgomp reads it as a process starts): a thread that spins long while it waits holds a core
// that a hub, another stage or the very thread it waits for needs. Returns the waits in force
// ("GOMP_SPINCOUNT=3000", or "libgomp's default").
std::string set_openmp_waits(const config::PipelineConfig& config, int cores);

}  // namespace seqpipe::supervisor
