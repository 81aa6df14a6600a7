#include "stage_runner.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace seqpipe::worker {

StageRunner::StageRunner(WorkerStage& stage, zmq::context_t& context, std::string model)
    : stage_(stage),
      model_(std::move(model)),
      wake_rx_(context, zmq::socket_type::pair),
      wake_tx_(context, zmq::socket_type::pair) {
  // One name per runner: a test may run several loops in one process (each has its context,
  // but the name costs nothing to make unique).
  const std::string endpoint =
      "inproc://seqpipe-stage-runner-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  wake_rx_.bind(endpoint);
  wake_tx_.connect(endpoint);
  thread_ = std::thread([this] { loop(); });
}

StageRunner::~StageRunner() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StageRunner::post(size_t hub, stage::StageMessage&& message) {
  {
    const std::lock_guard lock(mutex_);
    inbox_.push_back({hub, 0, std::move(message)});
  }
  wake_.notify_all();
}

void StageRunner::ask_ready(size_t hub, int share) {
  {
    const std::lock_guard lock(mutex_);
    inbox_.push_back({hub, share, std::nullopt});
  }
  wake_.notify_all();
}

bool StageRunner::warmed_up() {
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [&] { return warmed_.has_value() || failure_; });
  if (failure_) std::rethrow_exception(failure_);
  return *warmed_;
}

void StageRunner::collect(WorkerOutbox& out) {
  while (auto woken = wake_rx_.try_recv()) {
  }
  const std::lock_guard lock(mutex_);
  append(done_, out);
  if (failure_) std::rethrow_exception(failure_);
}

void StageRunner::append(WorkerOutbox& from, WorkerOutbox& to) {
  to.sends.insert(to.sends.end(), std::make_move_iterator(from.sends.begin()),
                  std::make_move_iterator(from.sends.end()));
  to.pushes.insert(to.pushes.end(), std::make_move_iterator(from.pushes.begin()),
                   std::make_move_iterator(from.pushes.end()));
  from.clear();
}

// Everything already posted is handled before the next unit of the stage's own work, so work
// that arrived meanwhile joins the decoder's running batch (continuous batching).
void StageRunner::loop() {
  try {
    const bool warmed = stage_.warm_up();
    const std::lock_guard lock(mutex_);
    warmed_ = warmed;
  } catch (...) {
    const std::lock_guard lock(mutex_);
    failure_ = std::current_exception();
  }
  wake_.notify_all();
  if (failure_) return;  // written by this thread alone
  std::vector<Task> tasks;
  WorkerOutbox out;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !inbox_.empty() || stage_.has_pending_work(); });
      if (stopping_) return;
      tasks.swap(inbox_);
    }
    try {
      for (Task& task : tasks) run(task, out);
      tasks.clear();
      if (stage_.has_pending_work()) stage_.work(out);
    } catch (...) {
      const std::lock_guard lock(mutex_);
      failure_ = std::current_exception();
      wake_tx_.send({std::string_view()}, true);
      return;
    }
    if (!out.empty()) hand_back(out);
  }
}

void StageRunner::run(Task& task, WorkerOutbox& out) {
  out.hub = task.hub;
  if (!task.message) {
    out.answer(stage::Ready{std::max(0, task.share - stage_.held(task.hub)), model_});
  } else if (const auto* cancel = std::get_if<stage::Cancel>(&*task.message)) {
    stage_.cancel(*cancel, out);
  } else {
    stage_.handle(std::move(*task.message), out);
  }
}

// Wakes the socket loop only when the outbox it will take was empty: a decoder's steps each
// add to it, and one wake-up takes them all.
void StageRunner::hand_back(WorkerOutbox& out) {
  bool was_empty = false;
  {
    const std::lock_guard lock(mutex_);
    was_empty = done_.empty();
    append(out, done_);
  }
  if (was_empty) wake_tx_.send({std::string_view()}, true);
}

}  // namespace seqpipe::worker
