#pragma once
// A worker's stage on a thread of its own. One engine batch can take seconds; computed on the
// socket loop's thread it silenced the worker's heartbeats, and a hub declared the worker dead
// in the middle of a batch. The socket loop (seqpipe/runtime/worker.h) posts the hubs' messages
// here and goes on polling; what the stage produced comes back through collect(). ZeroMQ sockets
// are not thread-safe: the messages cross under a mutex, and only a wake-up crosses ZeroMQ, over
// an inproc PAIR whose ends each belong to one thread.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "seqpipe/runtime/worker.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::worker {

class StageRunner {
 public:
  // Every call to `stage` from now on is made on the runner's thread, warm_up() first (so the
  // engine's per-thread state, a GPU's binding included, is warmed on the thread that serves).
  // `model` goes into the Ready messages it makes.
  StageRunner(WorkerStage& stage, zmq::context_t& context, std::string model);
  // Stops the thread after the message or step in hand.
  ~StageRunner();
  StageRunner(const StageRunner&) = delete;
  StageRunner& operator=(const StageRunner&) = delete;

  // Waits for the stage's warm_up(); true when it did something. Rethrows what it threw.
  bool warmed_up();
  // Readable when collect() has something (poll it beside the hubs' sockets).
  transport::Socket& signal() { return wake_rx_; }
  // A message from hub `hub` for the stage: a work message of the kind it accepts, or a cancel.
  void post(size_t hub, stage::StageMessage&& message);
  // Hub `hub` has a new connection: the Ready for it (`share` minus the credits the stage's
  // work from that hub still holds), made after the messages posted before, comes back through
  // collect() as a send to that hub.
  void ask_ready(size_t hub, int share);
  // Appends what the stage produced since the last call to `out`; rethrows what the stage threw.
  void collect(WorkerOutbox& out);

 private:
  struct Task {
    size_t hub = 0;
    int share = 0;                               // for a Ready
    std::optional<stage::StageMessage> message;  // none: make the Ready
  };
  void loop();
  void run(Task& task, WorkerOutbox& out);
  void hand_back(WorkerOutbox& out);
  static void append(WorkerOutbox& from, WorkerOutbox& to);

  WorkerStage& stage_;
  const std::string model_;
  transport::Socket wake_rx_;  // the socket loop's end
  transport::Socket wake_tx_;  // the runner thread's end
  std::mutex mutex_;
  std::condition_variable wake_;
  // Guarded by mutex_:
  std::vector<Task> inbox_;
  WorkerOutbox done_;
  std::exception_ptr failure_;
  bool stopping_ = false;
  std::optional<bool> warmed_;  // warm_up()'s answer, once it returned
  std::thread thread_;          // last: started once everything above exists
};

}  // namespace seqpipe::worker
