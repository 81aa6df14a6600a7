// The worker loop (seqpipe/runtime/worker.h) over real sockets: a worker serving two hubs announces
// each its share of the capacity and answers each message on the hub that sent it. The hubs are
// ROUTER sockets of the test on ephemeral tcp ports; no sleeps, every wait is a recv with a
// timeout. run_worker stops through service::request_stop(), a process-wide flag that is never
// cleared: it is the last thing a test here does (ctest runs each test in its own process).
#include "seqpipe/runtime/worker.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <thread>

#include "seqpipe/config/config_error.h"
#include "seqpipe/runtime/hub.h"
#include "seqpipe/runtime/service.h"
#include "seqpipe/transport/transport.h"
#include "socket_wait.h"

namespace seqpipe::worker {
namespace {

using std::chrono::milliseconds;
using test_util::parts_within;

TEST(WorkerHubShare, SharesAddUpToTheCapacityAndDifferByAtMostOne) {
  EXPECT_EQ(hub_share(5, 0, 2), 3);
  EXPECT_EQ(hub_share(5, 1, 2), 2);
  EXPECT_EQ(hub_share(32, 0, 1), 32);
  for (int capacity : {3, 7, 32}) {
    for (size_t hubs : {1u, 2u, 3u}) {
      int sum = 0;
      for (size_t h = 0; h < hubs; ++h) sum += hub_share(capacity, h, hubs);
      EXPECT_EQ(sum, capacity) << capacity << " over " << hubs;
    }
  }
  EXPECT_EQ(hubs_or({}, "ipc:///run/b.sock"), std::vector<std::string>{"ipc:///run/b.sock"});
  EXPECT_EQ(hubs_or({"tcp://a:1", "tcp://b:2"}, "ipc:///run/b.sock"),
            (std::vector<std::string>{"tcp://a:1", "tcp://b:2"}));
}

TEST(WorkerFrames, TensorFramesCrossRealSocketsBesideTheHeaderBothWays) {
  zmq::context_t context(1);
  transport::Socket hub(context, zmq::socket_type::router),
      worker(context, zmq::socket_type::dealer);
  worker.connect(hub.bind("tcp://127.0.0.1:*"));
  auto registry = metrics::make_registry();
  metrics::StageMetrics metrics(*registry, "frames");
  std::vector<float> values(64 * 512);  // a 64-token input's rows at t5-small's d_model: 128 KiB
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  stage::EncodedItem item, empty;
  item.request = 1, empty.request = 2;
  item.hidden = {64, stage::TensorFrame::floats(values.size(), [&](float* out) {
                   std::copy(values.begin(), values.end(), out);
                 })};
  const stage::StageMessage encoded = stage::Encoded{1, {item, empty}};
  ASSERT_TRUE(send_message(worker, {}, encoded));

  auto parts = parts_within(hub);
  ASSERT_TRUE(parts);
  ASSERT_EQ(parts->size(), 4u);  // routing id, header, one frame per item
  EXPECT_EQ((*parts)[2].size(), values.size() * sizeof(float));
  EXPECT_EQ((*parts)[3].size(), 0u);
  const std::string peer = (*parts)[0].to_string();
  auto at_hub = decode_parts(std::move(*parts), 1, "the worker", {}, metrics);
  ASSERT_TRUE(at_hub);
  EXPECT_EQ(*at_hub, encoded);
  // The hub passes the item on holding the frame it received, and sends it back in place.
  stage::Decode decode{std::move(std::get<stage::Encoded>(*at_hub).items)};
  const uint8_t* received = decode.items[0].hidden.values.bytes().data();
  ASSERT_TRUE(send_message(hub, peer, decode));
  EXPECT_EQ(decode.items[0].hidden.values.bytes().data(), received);
  auto back = parts_within(worker);
  ASSERT_TRUE(back);
  auto at_worker = decode_parts(std::move(*back), 0, "the hub", {}, metrics);
  ASSERT_TRUE(at_worker);
  EXPECT_EQ(*at_worker, stage::StageMessage(decode));

  // A frame too many, or a header missing, is a malformed message: dropped and counted.
  const std::string header = stage::encode(stage::Credit{1});
  const auto& frame = std::get<stage::Encoded>(encoded).items[0].hidden.values;
  const transport::SharedFrame extra[] = {{frame.bytes(), frame.owner()}};
  ASSERT_TRUE(worker.send_shared({std::string_view(header)}, extra));
  auto odd = parts_within(hub);
  ASSERT_TRUE(odd);
  EXPECT_FALSE(decode_parts(std::move(*odd), 1, "the worker", {}, metrics));
  transport::Parts routing_only(1);
  EXPECT_FALSE(decode_parts(std::move(routing_only), 1, "the worker", {}, metrics));
}

// Answers every message with one credit per item, to whoever sent it.
class EchoStage : public WorkerStage {
 public:
  int capacity() const override { return 3; }
  stage::MessageKind accepts() const override { return stage::MessageKind::kPostprocess; }
  void handle(stage::StageMessage&& message, WorkerOutbox& out) override {
    out.answer(
        stage::Credit{static_cast<int32_t>(std::get<stage::Postprocess>(message).items.size())});
  }
};

stage::StageMessage next_non_heartbeat(transport::Socket& hub, std::string& worker) {
  for (int i = 0; i < 20; ++i) {
    auto frames = hub.recv(milliseconds(5000));
    if (!frames) break;
    EXPECT_EQ(frames->size(), 2u);
    auto decoded = stage::decode(frames->back());
    EXPECT_TRUE(std::holds_alternative<stage::StageMessage>(decoded));
    if (!std::holds_alternative<stage::StageMessage>(decoded)) break;
    auto message = std::get<stage::StageMessage>(decoded);
    if (std::holds_alternative<stage::Heartbeat>(message)) continue;
    worker = frames->front();
    return message;
  }
  ADD_FAILURE() << "no message from the worker";
  return {};
}

TEST(WorkerLoop, ServesEveryHubWithItsShareAndAnswersTheHubThatSentTheWork) {
  zmq::context_t context(1);
  transport::Socket hub_a(context, zmq::socket_type::router),
      hub_b(context, zmq::socket_type::router);
  WorkerOptions options;
  options.drain_limit = milliseconds(0);  // these hubs do not wait for drains
  options.stage_name = "echo";
  options.hub_endpoints = {hub_a.bind("tcp://127.0.0.1:*"), hub_b.bind("tcp://127.0.0.1:*")};
  // The hubs here never send heartbeats: at 2 s a slow (ASan) run saw the worker take them for
  // dead after 6 s and reconnect, announcing itself again under a new routing id.
  options.heartbeat_interval = milliseconds(60000);
  auto registry = metrics::make_registry();
  metrics::StageMetrics metrics(*registry, "echo");
  EchoStage stage;
  std::thread loop([&] { run_worker(stage, options, metrics); });

  std::string worker_a, worker_b;
  const stage::StageMessage ready_a = next_non_heartbeat(hub_a, worker_a);
  const stage::StageMessage ready_b = next_non_heartbeat(hub_b, worker_b);
  EXPECT_EQ(ready_a, stage::StageMessage(stage::Ready{2}));  // 3 credits: 2 + 1
  EXPECT_EQ(ready_b, stage::StageMessage(stage::Ready{1}));

  const stage::StageMessage work = stage::Postprocess{{stage::DecodedItem{}, stage::DecodedItem{}}};
  hub_b.send({std::string_view(worker_b), std::string_view(stage::encode(work))});
  EXPECT_EQ(next_non_heartbeat(hub_b, worker_b), stage::StageMessage(stage::Credit{2}));
  hub_a.send({std::string_view(worker_a), std::string_view(stage::encode(work))});
  EXPECT_EQ(next_non_heartbeat(hub_a, worker_a), stage::StageMessage(stage::Credit{2}));
  // Had hub a's answer gone to hub b, it would be on b's connection before the answer to this
  // one-item work: waiting for a silence instead took a late heartbeat for a stray answer.
  const stage::StageMessage small_work = stage::Postprocess{{stage::DecodedItem{}}};
  hub_b.send({std::string_view(worker_b), std::string_view(stage::encode(small_work))});
  EXPECT_EQ(next_non_heartbeat(hub_b, worker_b), stage::StageMessage(stage::Credit{1}))
      << "hub b got an answer to hub a's work";

  service::request_stop();
  loop.join();
}

// A stage whose every message takes `compute` (the engine on one long batch).
class SlowStage : public EchoStage {
 public:
  explicit SlowStage(milliseconds compute) : compute_(compute) {}
  void handle(stage::StageMessage&& message, WorkerOutbox& out) override {
    if (!started_) started.set_value(), started_ = true;
    std::this_thread::sleep_for(compute_);
    EchoStage::handle(std::move(message), out);
  }

  std::promise<void> started;  // set when the first message's compute starts

 private:
  milliseconds compute_;
  bool started_ = false;
};

// The engine computes one message for 10 heartbeat intervals, over three times what a hub waits
// before it declares a silent worker dead: the worker's loop goes on sending heartbeats meanwhile,
// and the hub (a real WorkerPool on a ROUTER) keeps it and gets the answer. Computed on the
// loop's own thread, the batch silenced the worker and the hub answered its work `unavailable`.
TEST(WorkerLoop, AWorkerStaysAliveWhileItsStageComputesLongerThanTheHubWaits) {
  const config::LivenessConfig liveness{.heartbeat_interval_ms = 50, .heartbeat_liveness = 3};
  zmq::context_t context(1);
  transport::Socket hub(context, zmq::socket_type::router);
  WorkerOptions options;
  options.drain_limit = milliseconds(0);  // these hubs do not wait for drains
  options.stage_name = "slow";
  options.hub_endpoints = {hub.bind("tcp://127.0.0.1:*")};
  options.heartbeat_interval = milliseconds(liveness.heartbeat_interval_ms);
  options.heartbeat_liveness = liveness.heartbeat_liveness;
  auto registry = metrics::make_registry();
  metrics::StageMetrics metrics(*registry, "slow");
  SlowStage stage(milliseconds(10 * liveness.heartbeat_interval_ms));
  std::thread loop([&] { run_worker(stage, options, metrics); });

  hub::WorkerPool<stage::Postprocess> pool({"hub", "slow", 0}, liveness, metrics);
  const stage::Postprocess work{{stage::DecodedItem{}}};
  std::optional<stage::Credit> answer;
  std::vector<std::string> dead;
  const auto give_up = SteadyClock::now() + std::chrono::seconds(10);
  // The hub's loop; a failed assertion leaves it, and the worker is stopped either way.
  [&] {
    while (!answer && dead.empty() && SteadyClock::now() < give_up) {
      Outbox out;
      if (auto frames = hub.recv(milliseconds(10))) {
        ASSERT_EQ(frames->size(), 2u);
        auto decoded = stage::decode(frames->back());
        ASSERT_TRUE(std::holds_alternative<stage::StageMessage>(decoded));
        const auto& message = std::get<stage::StageMessage>(decoded);
        const std::string& worker = frames->front();
        if (const auto* ready = std::get_if<stage::Ready>(&message)) {
          pool.ready(worker, ready->credits, SteadyClock::now());
          ASSERT_EQ(pool.take(), worker);
          pool.sent(worker, work);
          out.sends.push_back({0, worker, work});
        } else if (pool.heard(worker, SteadyClock::now())) {
          if (const auto* credit = std::get_if<stage::Credit>(&message)) answer = *credit;
        }
      }
      dead = pool.tick(Now::read(), out);
      for (const auto& send : out.sends)
        ASSERT_TRUE(send_message(hub, send.peer, send.message, true));
    }
  }();
  service::request_stop();
  loop.join();
  EXPECT_EQ(dead, std::vector<std::string>{}) << "the hub declared the computing worker dead";
  ASSERT_TRUE(answer) << "no answer from the worker";
  EXPECT_EQ(answer->credits, 1);
}

// A hub (a ROUTER socket) on an ipc endpoint of its own, which a test can kill and start again at
// the same address.
struct RestartableHub {
  RestartableHub() : dir(make_dir()), endpoint("ipc://" + dir + "/hub.sock") { restart(); }
  ~RestartableHub() {
    socket.reset();
    std::filesystem::remove_all(dir);
  }
  void restart() {
    socket.reset();
    socket = std::make_unique<transport::Socket>(context, zmq::socket_type::router);
    socket->bind(endpoint);
  }
  static std::string make_dir() {
    char dir[] = "/tmp/seqpipe-worker-XXXXXX";
    if (::mkdtemp(dir) == nullptr) throw std::runtime_error("mkdtemp failed");
    return dir;
  }
  const std::string dir, endpoint;
  zmq::context_t context{1};
  std::unique_ptr<transport::Socket> socket;
};

// The hub dies and a new one binds the same endpoint: the worker sees its connection drop and
// announces itself to the new hub at once, long before its heartbeats would have told it.
TEST(WorkerLoop, AWorkerJoinsARestartedHubAtOnce) {
  RestartableHub hub;
  WorkerOptions options;
  options.drain_limit = milliseconds(0);  // these hubs do not wait for drains
  options.stage_name = "echo";
  options.hub_endpoints = {hub.endpoint};
  options.heartbeat_interval = milliseconds(20000);  // the heartbeats would notice after 60 s
  auto registry = metrics::make_registry();
  metrics::StageMetrics metrics(*registry, "echo");
  EchoStage stage;
  std::thread loop([&] { run_worker(stage, options, metrics); });

  std::string worker;
  EXPECT_EQ(next_non_heartbeat(*hub.socket, worker), stage::StageMessage(stage::Ready{3}));
  hub.restart();  // the hub dies and a new one starts
  std::string again;
  EXPECT_EQ(next_non_heartbeat(*hub.socket, again), stage::StageMessage(stage::Ready{3}));
  EXPECT_NE(again, worker) << "a new connection, a new routing id";
  const stage::StageMessage work = stage::Postprocess{{stage::DecodedItem{}}};
  hub.socket->send({std::string_view(again), std::string_view(stage::encode(work))});
  EXPECT_EQ(next_non_heartbeat(*hub.socket, again), stage::StageMessage(stage::Credit{1}));

  service::request_stop();
  loop.join();
}

// The hub restarts while the stage computes its work: the worker joins the new hub at once, but
// its ready (whose credits depend on the work in hand) comes after the work, and the work's
// answer, kept for the new connection, after the ready.
TEST(WorkerLoop, AWorkerRejoiningWhileItComputesAnnouncesItselfBeforeItsAnswer) {
  RestartableHub hub;
  WorkerOptions options;
  options.drain_limit = milliseconds(0);  // these hubs do not wait for drains
  options.stage_name = "slow";
  options.hub_endpoints = {hub.endpoint};
  options.heartbeat_interval = milliseconds(20000);
  auto registry = metrics::make_registry();
  metrics::StageMetrics metrics(*registry, "slow");
  SlowStage stage(milliseconds(500));
  std::thread loop([&] { run_worker(stage, options, metrics); });

  std::string worker;
  EXPECT_EQ(next_non_heartbeat(*hub.socket, worker), stage::StageMessage(stage::Ready{3}));
  const stage::StageMessage work = stage::Postprocess{{stage::DecodedItem{}}};
  hub.socket->send({std::string_view(worker), std::string_view(stage::encode(work))});
  ASSERT_EQ(stage.started.get_future().wait_for(std::chrono::seconds(5)),
            std::future_status::ready);
  hub.restart();  // the hub dies with the work in hand, and a new one starts
  std::string again, answering;
  EXPECT_EQ(next_non_heartbeat(*hub.socket, again), stage::StageMessage(stage::Ready{3}));
  EXPECT_EQ(next_non_heartbeat(*hub.socket, answering), stage::StageMessage(stage::Credit{1}));
  EXPECT_EQ(answering, again);

  service::request_stop();
  loop.join();
}

// Remembers the thread its warm-up ran on.
class WarmUpThreadStage : public EchoStage {
 public:
  bool warm_up() override {
    warmed_on.set_value(gettid());
    return false;
  }
  std::promise<pid_t> warmed_on;
};

// serve_worker makes the stage (loads its model) on a thread that has ended before the stage
// serves: libgomp keeps an OpenMP pool for the life of every thread that ran a parallel region,
// and a loading thread's pool beside the serving thread's cut every spin-wait short.
TEST(ServeWorker, MakesTheStageOnAThreadThatEndsBeforeTheStageServes) {
  zmq::context_t context(1);
  transport::Socket hub(context, zmq::socket_type::router);
  const std::string endpoint = hub.bind("tcp://127.0.0.1:*");
  pid_t made_on = 0;
  WarmUpThreadStage* made = nullptr;
  std::thread loop([&] {
    serve_worker("warm", "127.0.0.1", 0, {endpoint}, config::LivenessConfig{},
                 config::SecurityConfig{}, "m/1", [&](metrics::StageMetrics&) {
                   made_on = gettid();
                   auto stage = std::make_unique<WarmUpThreadStage>();
                   made = stage.get();
                   return stage;
                 });
  });
  std::string worker;
  EXPECT_EQ(next_non_heartbeat(hub, worker), stage::StageMessage(stage::Ready{3, "m/1"}));
  ASSERT_NE(made, nullptr);
  const pid_t warmed_on = made->warmed_on.get_future().get();
  EXPECT_NE(made_on, 0);
  EXPECT_NE(made_on, warmed_on);
  EXPECT_NE(made_on, gettid());
  EXPECT_FALSE(std::filesystem::exists("/proc/self/task/" + std::to_string(made_on)))
      << "the thread that made the stage is still running";
  service::request_stop();
  loop.join();
}

TEST(ServeWorker, ThrowsWhatMakingTheStageThrew) {
  EXPECT_THROW(serve_worker("broken", "127.0.0.1", 0, {"tcp://127.0.0.1:1"},
                            config::LivenessConfig{}, config::SecurityConfig{}, "m/1",
                            [](metrics::StageMetrics&) -> std::unique_ptr<WorkerStage> {
                              throw config::ConfigError("model.dir /nowhere does not load");
                            }),
               config::ConfigError);
}

}  // namespace
}  // namespace seqpipe::worker
