// ModelLifecycle driven without sockets or processes: a World that records what the lifecycle
// starts, stops and sends, and answers for the hubs and gateways as each test sets; time passed
// in, as the supervisor's loop passes it.
#include "seqpipe/control/model_lifecycle.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace seqpipe::control {
namespace {

using model_control::ControlReply;
using model_control::ControlRequest;
using model_control::ModelEntry;
using model_control::Op;
using model_control::State;
using std::chrono::milliseconds;

class FakeWorld : public World {
 public:
  config::ModelRepository repository;
  // What the hubs and gateways answer.
  std::set<std::string> ready, present;
  bool hubs_answer = true;
  std::optional<model_control::InFlight> in_flight = model_control::InFlight{};
  // What the lifecycle did, in order: "start alpha/2", "stop alpha/1 5000ms".
  std::vector<std::string> actions;
  std::vector<config::ModelVersion> last_catalog;

  config::ModelRepository scan() override { return repository; }
  void start_replicas(const config::ModelVersion& version) override {
    actions.push_back("start " + config::model_key(version.name, version.version));
  }
  void stop_replicas(const std::string& key, milliseconds drain) override {
    actions.push_back("stop " + key + " " + std::to_string(drain.count()) + "ms");
  }
  HubView ask_hubs(const std::vector<std::string>& keys) override {
    HubView view;
    view.all_answered = hubs_answer;
    if (!hubs_answer) return view;
    for (const std::string& key : keys) {
      if (ready.contains(key)) view.ready.insert(key);
      if (present.contains(key)) view.present.insert(key);
    }
    return view;
  }
  std::optional<model_control::InFlight> send_catalog(
      const std::vector<config::ModelVersion>& catalog) override {
    last_catalog = catalog;
    return in_flight;
  }
};

config::ModelVersion version(const std::string& name, int v) {
  return {name, v, "/repo/" + name + "/" + std::to_string(v)};
}

class ModelLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_.repository.models = {version("alpha", 1), version("alpha", 2), version("beta", 1)};
  }
  // `seqpipe up` started with `served`, warm at once (READY after the first round).
  void start(const std::vector<config::ModelVersion>& served) {
    for (const auto& m : served) {
      world_.ready.insert(config::model_key(m.name, m.version));
      world_.present.insert(config::model_key(m.name, m.version));
    }
    lifecycle_.started(config::ModelRepository{served, {}}, now_);
    tick();
  }
  // One round of the supervisor's loop, a little more than a hub check after the last.
  void tick(milliseconds step = milliseconds(300)) {
    now_ += step;
    lifecycle_.tick(now_);
  }
  void ask(Op op, const std::string& name, std::optional<int> v = std::nullopt) {
    lifecycle_.on_request("client", ControlRequest{op, name, v}, now_);
  }
  State state_of(const std::string& name, int v) const {
    for (const ModelEntry& e : lifecycle_.index().models)
      if (e.name == name && e.version == v) return e.state;
    ADD_FAILURE() << name << "/" << v << " is not in the index";
    return State::kUnavailable;
  }
  bool routed(const std::string& name, int v) const {
    return std::find(world_.last_catalog.begin(), world_.last_catalog.end(), version(name, v)) !=
           world_.last_catalog.end();
  }
  // The one reply due (to "client"), if any.
  std::optional<ControlReply> reply() {
    auto replies = lifecycle_.take_replies();
    EXPECT_LE(replies.size(), 1u);
    if (replies.empty()) return std::nullopt;
    EXPECT_EQ(replies.front().first, "client");
    return replies.front().second;
  }
  // The reply due now says the request succeeded.
  void expect_answered_ok() {
    const auto done = reply();
    ASSERT_TRUE(done.has_value());
    EXPECT_FALSE(done->error.has_value());
  }

  FakeWorld world_;
  ModelLifecycle lifecycle_{"/repo", world_};
  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
};

TEST_F(ModelLifecycleTest, ALoadIsReadyOnlyOnceEveryStageHasALiveReplica) {
  start({version("alpha", 1)});
  ask(Op::kLoad, "beta");
  EXPECT_EQ(world_.actions, std::vector<std::string>{"start beta/1"});
  world_.present.insert("beta/1");  // some stages have one, not every stage: not ready
  for (int i = 0; i < 5; ++i) tick();
  EXPECT_EQ(reply(), std::nullopt);
  EXPECT_EQ(state_of("beta", 1), State::kLoading);
  EXPECT_FALSE(routed("beta", 1));
  world_.ready.insert("beta/1");
  tick();
  expect_answered_ok();
  EXPECT_EQ(state_of("beta", 1), State::kReady);
  EXPECT_TRUE(routed("beta", 1));
  EXPECT_TRUE(routed("alpha", 1));
  EXPECT_EQ(world_.actions, std::vector<std::string>{"start beta/1"});  // nothing stopped
}

TEST_F(ModelLifecycleTest, AReloadUnloadsTheOldVersionOnlyAfterTheNewOneIsReady) {
  start({version("alpha", 1)});
  ask(Op::kLoad, "alpha");  // the highest: 2
  for (int i = 0; i < 5; ++i) tick();
  EXPECT_EQ(state_of("alpha", 1), State::kReady);
  EXPECT_TRUE(routed("alpha", 1));
  EXPECT_EQ(world_.actions, std::vector<std::string>{"start alpha/2"});
  world_.ready.insert("alpha/2");
  tick();
  // Ready: alpha/2 routed, alpha/1 no longer, and stopped once no gateway holds a request of it.
  EXPECT_TRUE(routed("alpha", 2));
  EXPECT_FALSE(routed("alpha", 1));
  EXPECT_EQ(world_.actions, (std::vector<std::string>{"start alpha/2", "stop alpha/1 5000ms"}));
  EXPECT_EQ(state_of("alpha", 1), State::kUnloading);
  EXPECT_EQ(reply(), std::nullopt);  // answered once the old version is gone
  world_.present.erase("alpha/1");
  tick();
  expect_answered_ok();
  EXPECT_EQ(state_of("alpha", 1), State::kUnavailable);
  EXPECT_EQ(state_of("alpha", 2), State::kReady);
}

TEST_F(ModelLifecycleTest, AnUnloadWaitsForTheRequestsInFlightThenStopsTheReplicas) {
  start({version("alpha", 1), version("beta", 1)});
  world_.in_flight = model_control::InFlight{{"alpha/1", 2}};
  ask(Op::kUnload, "alpha");
  for (int i = 0; i < 5; ++i) tick();
  EXPECT_FALSE(routed("alpha", 1));
  EXPECT_TRUE(routed("beta", 1));
  EXPECT_EQ(state_of("alpha", 1), State::kUnloading);
  EXPECT_TRUE(world_.actions.empty());  // two requests still in flight
  world_.in_flight = std::nullopt;      // a gateway that does not answer may still hold one
  for (int i = 0; i < 3; ++i) tick();
  EXPECT_TRUE(world_.actions.empty());
  world_.in_flight = model_control::InFlight{{"alpha/1", 0}};
  tick();
  EXPECT_EQ(world_.actions, std::vector<std::string>{"stop alpha/1 5000ms"});
  world_.present.erase("alpha/1");
  tick();
  expect_answered_ok();
  EXPECT_EQ(state_of("alpha", 1), State::kUnavailable);
  EXPECT_EQ(state_of("beta", 1), State::kReady);
}

TEST_F(ModelLifecycleTest, AnUnloadGivesUpWaitingForTheHubsAfterTheLeaveWait) {
  start({version("alpha", 1)});
  ask(Op::kUnload, "alpha", 1);
  tick();
  ASSERT_EQ(world_.actions, std::vector<std::string>{"stop alpha/1 5000ms"});
  world_.hubs_answer = false;  // the hubs cannot say the replicas left
  tick(kLeaveWait - milliseconds(500));
  EXPECT_EQ(reply(), std::nullopt);
  EXPECT_EQ(state_of("alpha", 1), State::kUnloading);
  tick(milliseconds(600));
  ASSERT_TRUE(reply().has_value());
  EXPECT_EQ(state_of("alpha", 1), State::kUnavailable);
}

TEST_F(ModelLifecycleTest, ALoadThatTimesOutFailsWithTheReason) {
  start({version("alpha", 1)});
  ask(Op::kLoad, "beta", 1);
  tick(model_control::kLoadTimeout - milliseconds(500));
  EXPECT_EQ(reply(), std::nullopt);
  tick(milliseconds(600));
  const auto failed = reply();
  ASSERT_TRUE(failed.has_value());
  ASSERT_TRUE(failed->error.has_value());
  EXPECT_EQ(failed->error->code, protocol::ErrorCode::kUnavailable);
  EXPECT_EQ(
      failed->error->message,
      "model beta/1 did not load: /repo/beta/1: its replicas were not all ready within 120 s");
  EXPECT_EQ(state_of("beta", 1), State::kUnavailable);
  EXPECT_EQ(world_.actions, (std::vector<std::string>{"start beta/1", "stop beta/1 1000ms"}));
  EXPECT_EQ(state_of("alpha", 1), State::kReady);  // the version serving goes on
}

TEST_F(ModelLifecycleTest, AGivenUpChildMakesItsVersionUnavailable) {
  start({version("alpha", 1), version("beta", 1)});
  ASSERT_TRUE(routed("beta", 1));
  lifecycle_.given_up("beta/1", "decoder #0 exited with status 2");
  tick();
  EXPECT_FALSE(routed("beta", 1));
  EXPECT_TRUE(routed("alpha", 1));
  EXPECT_EQ(world_.actions, std::vector<std::string>{"stop beta/1 1000ms"});
  const auto index = lifecycle_.index();
  const auto beta = std::find_if(index.models.begin(), index.models.end(),
                                 [](const ModelEntry& e) { return e.name == "beta"; });
  ASSERT_NE(beta, index.models.end());
  EXPECT_EQ(beta->state, State::kUnavailable);
  EXPECT_EQ(beta->reason, "/repo/beta/1: decoder #0 exited with status 2");
}

TEST_F(ModelLifecycleTest, TheIndexListsEveryVersionWithItsState) {
  world_.repository.bad = {{"/repo/gamma/x", "not a version number"}};
  world_.ready.clear();
  lifecycle_.started(config::ModelRepository{{version("alpha", 1)}, {}}, now_);
  ask(Op::kIndex, "");
  const auto index = reply();
  ASSERT_TRUE(index.has_value());
  EXPECT_FALSE(index->error.has_value());
  EXPECT_EQ(index->models,
            (std::vector<ModelEntry>{
                {"alpha", 1, State::kLoading, ""},
                {"alpha", 2, State::kUnavailable, "not loaded"},
                {"beta", 1, State::kUnavailable, "not loaded"},
                {"gamma", 0, State::kUnavailable, "/repo/gamma/x: not a version number"},
            }));
}

TEST_F(ModelLifecycleTest, AModelNotInTheRepositoryOrNotLoadedIsNotFound) {
  start({version("alpha", 1)});
  ask(Op::kLoad, "delta");
  auto refused = reply();
  ASSERT_TRUE(refused && refused->error);
  EXPECT_EQ(refused->error->code, protocol::ErrorCode::kNotFound);
  EXPECT_EQ(refused->error->message, "model 'delta' is not in the repository /repo");
  ask(Op::kUnload, "beta");
  refused = reply();
  ASSERT_TRUE(refused && refused->error);
  EXPECT_EQ(refused->error->message, "model 'beta' is not loaded");
  EXPECT_TRUE(world_.actions.empty());
}

}  // namespace
}  // namespace seqpipe::control
