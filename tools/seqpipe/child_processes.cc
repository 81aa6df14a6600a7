#include "seqpipe/child_processes.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "seqpipe/runtime/service_main.h"

namespace seqpipe::supervisor {
namespace {

// Starts `spec` with the write end of a new pipe as its kExitReasonFdVariable; the read end (or -1
// when no pipe could be made) goes to `reason_fd`. Everything the child needs is made before the
// fork: this process has other threads (ZeroMQ's), so the child may only make system calls.
pid_t spawn(const ChildSpec& spec, int& reason_fd) {
  const std::vector<std::string>& args = spec.argv;
  int pipe_fds[2] = {-1, -1};
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) pipe_fds[0] = pipe_fds[1] = -1;
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {  // the variables this function sets left out
    const std::string_view name = std::string_view(*e).substr(0, std::string_view(*e).find('='));
    if (name != service::kExitReasonFdVariable && name != service::kStartedIdleVariable)
      env_strings.emplace_back(*e);
  }
  if (pipe_fds[1] >= 0)
    env_strings.push_back(std::string(service::kExitReasonFdVariable) + "=" +
                          std::to_string(pipe_fds[1]));
  if (spec.start_idle) env_strings.push_back(std::string(service::kStartedIdleVariable) + "=1");
  std::vector<char*> env, argv;
  for (auto& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child is stopped (SIGTERM: it drains) when seqpipe up dies, even by SIGKILL, so no
    // orphan keeps the pipeline's sockets; if that happened before prctl took effect, leave now.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) std::_Exit(1);
    if (pipe_fds[1] >= 0) ::fcntl(pipe_fds[1], F_SETFD, 0);  // kept across exec
    const sched_param idle{};
    if (spec.start_idle) ::sched_setscheduler(0, SCHED_IDLE, &idle);
    ::execvpe(argv[0], argv.data(), env.data());
    std::fprintf(stderr, "seqpipe up: cannot run %s: %s\n", argv[0], std::strerror(errno));
    std::_Exit(127);
  }
  if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
  reason_fd = pipe_fds[0];
  return pid;
}

// What an exited child wrote to its reason pipe (its last error), and the pipe closed.
std::string take_reason(int& fd) {
  if (fd < 0) return {};
  char buffer[1024];
  const ssize_t n = ::read(fd, buffer, sizeof buffer);
  ::close(fd);
  fd = -1;
  std::string reason(buffer, n > 0 ? static_cast<size_t>(n) : 0);
  while (!reason.empty() && reason.back() == '\n') reason.pop_back();
  return reason;
}

}  // namespace

ChildProcesses::ChildProcesses(std::vector<ChildSpec> specs, RestartPolicy policy)
    : policy_(policy) {
  children_.reserve(specs.size());
  for (ChildSpec& spec : specs) children_.push_back({std::move(spec), -1, RestartTracker(policy)});
}

ChildProcesses::~ChildProcesses() {
  stop();
}

void ChildProcesses::start() {
  for (Child& child : children_) {
    child.pid = spawn(child.spec, child.reason_fd);
    child.restarts.started(Clock::now());
  }
}

std::optional<GivenUp> ChildProcesses::exited(Child& child, int status) {
  child.pid = -1;
  const std::string said = take_reason(child.reason_fd);
  const Exit exit{WIFSIGNALED(status) != 0,
                  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status)};
  const auto now = Clock::now();
  const auto decision = child.restarts.exited(exit, now);
  const std::string who = child.spec.stage + " #" + std::to_string(child.spec.replica);
  if (decision.give_up) {
    child.given_up = true;
    std::fprintf(stderr, "seqpipe up: %s %s: %s\n", who.c_str(), decision.reason.c_str(),
                 child.spec.group.empty()
                     ? "stopping the pipeline"
                     : ("model " + child.spec.group + " is not served").c_str());
    return GivenUp{child.spec.group,
                   who + " " + decision.reason + (said.empty() ? "" : ": " + said)};
  }
  child.start_after = decision.restart_at;
  std::fprintf(
      stderr, "seqpipe up: %s exited (%s); restarting in %lld ms\n", who.c_str(),
      exit.describe().c_str(),
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(child.start_after - now).count()));
  return std::nullopt;
}

std::vector<GivenUp> ChildProcesses::step() {
  std::vector<GivenUp> given_up;
  int status = 0;
  pid_t pid = 0;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    for (Child& child : children_) {
      if (child.pid != pid) continue;
      if (auto g = exited(child, status)) given_up.push_back(std::move(*g));
    }
  }
  for (Child& child : children_) {
    if (child.pid < 0 && !child.given_up && Clock::now() >= child.start_after) {
      child.pid = spawn(child.spec, child.reason_fd);
      child.restarts.started(Clock::now());
    }
  }
  return given_up;
}

bool ChildProcesses::supervise(const std::function<bool()>& stop_requested) {
  while (!stop_requested()) {
    if (!step().empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

void ChildProcesses::add(std::vector<ChildSpec> specs, std::chrono::milliseconds start_gap) {
  Clock::time_point start_at = Clock::now();
  for (ChildSpec& spec : specs) {
    Child child{std::move(spec), -1, RestartTracker(policy_)};
    child.start_after = start_at;
    if (start_at <= Clock::now()) {
      child.pid = spawn(child.spec, child.reason_fd);
      child.restarts.started(Clock::now());
    }
    children_.push_back(std::move(child));
    start_at += start_gap;
  }
}

void ChildProcesses::stop_group(const std::string& group, std::chrono::milliseconds drain) {
  const auto in_group = [&](const Child& child) { return child.spec.group == group; };
  stop_if(in_group, drain);
  std::erase_if(children_, in_group);
}

std::vector<pid_t> ChildProcesses::pids(const std::string& group) const {
  std::vector<pid_t> pids;
  for (const Child& child : children_)
    if (child.spec.group == group && child.pid > 0) pids.push_back(child.pid);
  return pids;
}

void ChildProcesses::stop(std::chrono::milliseconds drain) {
  stop_if([](const Child&) { return true; }, drain);
}

void ChildProcesses::stop_if(const std::function<bool(const Child&)>& which,
                             std::chrono::milliseconds drain) {
  for (const Child& child : children_) {
    if (child.pid > 0 && which(child)) ::kill(child.pid, SIGTERM);
  }
  const auto give_up = Clock::now() + drain;
  size_t alive = 1;
  while (alive > 0 && Clock::now() < give_up) {
    alive = 0;
    for (Child& child : children_) {
      if (child.pid <= 0 || !which(child)) continue;
      if (::waitpid(child.pid, nullptr, WNOHANG) == 0) {
        ++alive;
      } else {
        child.pid = -1;
        take_reason(child.reason_fd);
      }
    }
    if (alive > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (Child& child : children_) {
    if (child.pid > 0 && which(child)) {
      ::kill(child.pid, SIGKILL);
      ::waitpid(child.pid, nullptr, 0);
      child.pid = -1;
      take_reason(child.reason_fd);
    }
  }
}

size_t ChildProcesses::running() const {
  size_t n = 0;
  for (const Child& child : children_) n += child.pid > 0 ? 1 : 0;
  return n;
}

}  // namespace seqpipe::supervisor
