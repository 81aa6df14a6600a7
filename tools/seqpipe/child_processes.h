#pragma once
// The processes `seqpipe up` runs: started together, each restarted by its RestartTracker when
// it exits, all stopped together (SIGTERM, time to drain, then SIGKILL). Children die with the
// supervisor, even when it is killed. Real processes: tested with small shell commands.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "seqpipe/supervisor.h"

namespace seqpipe::supervisor {

struct ChildSpec {
  std::string stage;  // "decoder", for messages
  int replica = 0;
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
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
  // SIGTERM to every child, up to `drain` for them to exit, then SIGKILL; reaps them all.
  void stop(std::chrono::milliseconds drain = std::chrono::seconds(5));
  // Children running now (tests).
  size_t running() const;

 private:
  struct Child {
    ChildSpec spec;
    pid_t pid = -1;
    RestartTracker restarts;
    Clock::time_point start_after{};
  };
  // The child that ended with `status` (as waitpid gives it): when to start it again; true
  // when it is given up.
  bool exited(Child& child, int status);

  std::vector<Child> children_;
};

}  // namespace seqpipe::supervisor
