// The one hub loop (seqpipe/runtime/hub_loop.h) with a small HubStage over inproc sockets: a
// readable input goes to the stage's handler, a due timer wakes the loop long before its longest
// wait, the status probe is answered with the hub's uptime and `about`, a worker's message goes
// to on_worker with its link, the stage's sends go out over that link (one that cannot be
// delivered comes back as unreachable), and a stop ends the loop. Every wait is bounded. run_hub
// stops through service::request_stop(), a process-wide flag that is never cleared: it is the
// last thing a test here does (ctest runs each test in its own process).
#include "seqpipe/runtime/hub_loop.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>
#include <utility>

#include "seqpipe/runtime/service.h"
#include "seqpipe/runtime/worker.h"
#include "socket_wait.h"

namespace seqpipe::hub {
namespace {

using std::chrono::milliseconds;
using test_util::parts_within;

constexpr std::string_view kInput = "inproc://hub-loop-test-input";
constexpr std::string_view kWorkers = "inproc://hub-loop-test-workers";

// Records what the loop asks of it, each first time, as promises the test waits on.
class ProbeStage : public HubStage {
 public:
  explicit ProbeStage(zmq::context_t& context)
      : input_(context, zmq::socket_type::pull), workers_(context, zmq::socket_type::router) {
    input_.bind(std::string(kInput));
    workers_.bind(std::string(kWorkers));
  }

  void watch(HubSockets& sockets) override {
    sockets.input(input_);
    link_ = sockets.workers(workers_, "a test worker");
  }
  std::optional<std::chrono::nanoseconds> until_next_timer() const override {
    if (timer_fired_) return std::nullopt;
    return due_ - SteadyClock::now();
  }
  void on_readable(size_t input, const Now&, Outbox&) override {
    while (auto frames = input_.try_recv()) {
      if (!input_seen_) input_seen_promise.set_value({input, frames->at(0)});
      input_seen_ = true;
    }
  }
  void on_worker(size_t link, const std::string& worker, stage::StageMessage&& message,
                 const Now&) override {
    if (!worker_message_) {
      worker_message_promise.set_value({link, std::string(stage::kind_name(message))});
      answer_ = worker;
    }
    worker_message_ = true;
  }
  std::vector<status::StageStatus> status() const override {
    return {{.stage = "test-hub"}, {.stage = "test-worker", .replicas = 2}};
  }
  std::string about() const override { return "a test hub"; }
  void tick(const Now& now, Outbox&) override {
    if (timer_fired_ || now.steady < due_) return;
    timer_fired_ = true;
    timer_promise.set_value(now.steady);
  }
  // The worker that spoke gets a heartbeat, and so does one that is not there.
  void dispatch(const Now&, Outbox& out) override {
    if (answer_.empty()) return;
    out.sends.push_back({link_, answer_, stage::Heartbeat{.from = "the test hub"}});
    out.sends.push_back({link_, "nobody", stage::Heartbeat{}});
    answer_.clear();
  }
  void unreachable(size_t link, const std::string& worker, const Now&, Outbox&) override {
    if (!unreachable_) unreachable_promise.set_value({link, worker});
    unreachable_ = true;
  }
  void stopped() override { stopped_promise.set_value(); }

  const SteadyClock::time_point due_ = SteadyClock::now() + milliseconds(50);
  std::promise<SteadyClock::time_point> timer_promise;
  std::promise<std::pair<size_t, std::string>> input_seen_promise, worker_message_promise,
      unreachable_promise;
  std::promise<void> stopped_promise;

 private:
  transport::Socket input_, workers_;
  size_t link_ = 0;
  bool timer_fired_ = false, input_seen_ = false, worker_message_ = false, unreachable_ = false;
  std::string answer_;  // the worker to answer in the next dispatch
};

TEST(HubLoop, DispatchesInputsWorkersAndTimersAnswersTheProbeAndStops) {
  zmq::context_t context(1);
  auto registry = metrics::make_registry();
  metrics::StageMetrics metrics(*registry, "test-hub");
  transport::PushSockets pushes(context);
  ProbeStage stage(context);
  auto timer = stage.timer_promise.get_future();
  auto input = stage.input_seen_promise.get_future();
  auto from_worker = stage.worker_message_promise.get_future();
  auto unreachable = stage.unreachable_promise.get_future();
  auto stopped = stage.stopped_promise.get_future();
  HubOptions options;
  options.name = "test-hub";
  options.max_wait = milliseconds(60000);  // only the stage's timer makes a round end sooner
  options.started = std::chrono::steady_clock::now() - std::chrono::hours(2);
  transport::Socket pusher(context, zmq::socket_type::push);
  pusher.connect(std::string(kInput));
  std::thread loop([&] { run_hub(stage, options, pushes, metrics); });
  // However the test ends: a stop, and a message to wake the loop's poll to see it.
  struct StopAndJoin {
    std::thread& loop;
    transport::Socket& pusher;
    ~StopAndJoin() {
      service::request_stop();
      (void)pusher.send({std::string_view("wake up")});
      loop.join();
    }
  } stop_and_join{loop, pusher};

  // The timer is due 50 ms after the stage was made: it fires then, not after the 60 s wait.
  ASSERT_EQ(timer.wait_for(milliseconds(5000)), std::future_status::ready);
  EXPECT_GE(timer.get(), stage.due_);

  ASSERT_TRUE(pusher.send({std::string_view("hello")}));
  ASSERT_EQ(input.wait_for(milliseconds(5000)), std::future_status::ready);
  EXPECT_EQ(input.get(), (std::pair<size_t, std::string>{0, "hello"}));

  // The probe is the loop's to answer: the stage's lines, its own with the uptime and `about`.
  transport::Socket worker(context, zmq::socket_type::dealer);
  worker.connect(std::string(kWorkers));
  ASSERT_TRUE(worker.send({status::kProbe}));
  auto probe = parts_within(worker);
  ASSERT_TRUE(probe);
  const auto lines = status::decode(probe->back().to_string_view());
  ASSERT_TRUE(lines);
  ASSERT_EQ(lines->size(), 2u);
  EXPECT_EQ((*lines)[0].about, "a test hub");
  EXPECT_GE((*lines)[0].uptime_s, 7200);
  EXPECT_EQ((*lines)[1].replicas, 2);

  // A worker's message reaches on_worker with its socket's link, and the stage's answer to it
  // goes back over that socket; the send to a routing id nobody has comes back as unreachable.
  ASSERT_TRUE(worker::send_message(worker, {}, stage::Ready{.credits = 3}));
  ASSERT_EQ(from_worker.wait_for(milliseconds(5000)), std::future_status::ready);
  EXPECT_EQ(from_worker.get(), (std::pair<size_t, std::string>{0, "ready"}));
  auto answer = parts_within(worker);
  ASSERT_TRUE(answer);
  const auto heartbeat =
      worker::decode_parts(std::move(*answer), 0, "the test hub", stage::Limits{}, metrics);
  ASSERT_TRUE(heartbeat);
  EXPECT_EQ(*heartbeat, stage::StageMessage(stage::Heartbeat{.from = "the test hub"}));
  ASSERT_EQ(unreachable.wait_for(milliseconds(5000)), std::future_status::ready);
  EXPECT_EQ(unreachable.get(), (std::pair<size_t, std::string>{0, "nobody"}));

  // A stop ends the loop at its next round (a signal would wake its poll; a message does here).
  service::request_stop();
  ASSERT_TRUE(pusher.send({std::string_view("wake up")}));
  EXPECT_EQ(stopped.wait_for(milliseconds(5000)), std::future_status::ready);
}

}  // namespace
}  // namespace seqpipe::hub
