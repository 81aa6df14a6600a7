#pragma once
// The processes `seqpipe up` runs: started together (a model version's a gap apart), each
// restarted by its RestartTracker when it exits, all stopped together (SIGTERM, time to drain,
// then SIGKILL). Children die with the supervisor, even when it is killed. Real processes: tested
// with small shell commands.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "seqpipe/supervisor.h"

namespace seqpipe::supervisor {

struct ChildSpec {
  std::string stage;  // "decoder", for messages
  int replica = 0;
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  // The model version ("name/version") whose replica this is, started and stopped together with
  // the others of its group; "" for the hubs and a pipeline without a repository.
  std::string group = {};
  // Started (and restarted) at SCHED_IDLE with service::kStartedIdleVariable set: a replica
  // started beside serving ones, which leaves SCHED_IDLE once warm (service::leave_idle_start).
  bool start_idle = false;
};

// A child given up (see RestartTracker): left stopped.
struct GivenUp {
  std::string group;
  // "decoder #0 exited with status 2 (bad usage or config): model.dir ... does not load: ...",
  // with what the child wrote to its service::kExitReasonFdVariable pipe, if anything.
  std::string reason;
};

class ChildProcesses {
 public:
  explicit ChildProcesses(std::vector<ChildSpec> specs, RestartPolicy policy = {});
  ~ChildProcesses();  // stop(): no child outlives this object
  ChildProcesses(const ChildProcesses&) = delete;
  ChildProcesses& operator=(const ChildProcesses&) = delete;

  size_t size() const { return children_.size(); }
  void start();
  // Restarts children that exit (the reasons on stderr) until `stop_requested` is true or a child
  // is given up. True when given up; the children still run either way.
  bool supervise(const std::function<bool()>& stop_requested);
  // One round of supervise(): reaps the children that exited and starts again those due. Returns
  // the children given up in this round (they stay stopped; the others run on).
  std::vector<GivenUp> step();
  // Starts more children (a model version's replicas): the first now, each next one `start_gap`
  // after the one before (step() starts them), so that their start-up work never takes every
  // core from the children already serving.
  void add(std::vector<ChildSpec> specs, std::chrono::milliseconds start_gap = {});
  // Stops the children of `group` as stop() does, and forgets them.
  void stop_group(const std::string& group, std::chrono::milliseconds drain);
  // The pids of `group`'s children running now.
  std::vector<pid_t> pids(const std::string& group) const;
  // SIGTERM to every child, up to `drain` for them to exit, then SIGKILL; reaps them all.
  void stop(std::chrono::milliseconds drain = std::chrono::seconds(5));
  // Children running now (tests).
  size_t running() const;

 private:
  struct Child {
    ChildSpec spec;
    pid_t pid = -1;
    RestartTracker restarts;
    int reason_fd = -1;  // the read end of the pipe where the running child says why it fails
    Clock::time_point start_after{};
    bool given_up = false;
  };
  // SIGTERM to the children `which` picks, up to `drain` for them to exit, then SIGKILL.
  void stop_if(const std::function<bool(const Child&)>& which, std::chrono::milliseconds drain);
  // The child that ended with `status` (as waitpid gives it): when to start it again, or why it
  // is given up.
  std::optional<GivenUp> exited(Child& child, int status);

  RestartPolicy policy_;
  std::vector<Child> children_;
};

}  // namespace seqpipe::supervisor
