// The model control messages over real sockets: the catalog's round trip to a hub's worker socket
// (hub::read_workers) and the control request's to a ROUTER. Their codecs: control_tests.
#include "seqpipe/runtime/model_control.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "seqpipe/runtime/hub.h"

namespace seqpipe::model_control {
namespace {

using std::chrono::milliseconds;

TEST(ModelControl, AHubAnswersTheCatalogWithItsHandlerOverRealSockets) {
  zmq::context_t context(1);
  transport::Socket hub(context, zmq::socket_type::router);
  const std::string endpoint = hub.bind("tcp://127.0.0.1:*");
  auto registry = metrics::make_registry();
  metrics::StageMetrics metrics(*registry, "gateway");
  std::vector<CatalogEntry> received;
  std::atomic<bool> done = false;
  std::thread serving([&] {
    while (!done) {
      hub::read_workers(
          hub, "test", stage::Limits{}, metrics, [] { return std::vector<status::StageStatus>{}; },
          [](const std::string&, stage::StageMessage&&) {},
          [&](std::string_view bytes) {
            received = decode_catalog(bytes).value_or(std::vector<CatalogEntry>{});
            return encode_in_flight({{"alpha/2", 4}});
          });
      std::this_thread::sleep_for(milliseconds(5));
    }
  });
  CatalogEntry alpha{{"alpha", 2, "/r/alpha/2"}, {}};
  alpha.settings.split_words = 3;
  const auto answer = send_catalog(context, endpoint, {alpha}, milliseconds(5000), {});
  done = true;
  serving.join();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(*answer, (InFlight{{"alpha/2", 4}}));
  EXPECT_EQ(received, (std::vector<CatalogEntry>{alpha}));
}

TEST(ModelControl, NoSupervisorIsAnUnavailableReplyNamingTheEndpoint) {
  zmq::context_t context(1);
  const auto reply = ask_supervisor(context, "ipc:///tmp/seqpipe-no-such-supervisor.sock",
                                    {Op::kIndex, "", std::nullopt}, milliseconds(200));
  ASSERT_TRUE(reply.error.has_value());
  EXPECT_EQ(reply.error->code, protocol::ErrorCode::kUnavailable);
  EXPECT_NE(reply.error->message.find("seqpipe-no-such-supervisor.sock"), std::string::npos);
  EXPECT_NE(reply.error->message.find("no such socket"), std::string::npos);  // said at once
}

TEST(ModelControl, ASupervisorThatDoesNotAnswerIsUnavailableAfterTheWait) {
  zmq::context_t context(1);
  transport::Socket silent(context, zmq::socket_type::router);
  const std::string endpoint = silent.bind("tcp://127.0.0.1:*");
  const auto reply =
      ask_supervisor(context, endpoint, {Op::kIndex, "", std::nullopt}, milliseconds(200));
  ASSERT_TRUE(reply.error.has_value());
  EXPECT_EQ(reply.error->code, protocol::ErrorCode::kUnavailable);
  EXPECT_NE(reply.error->message.find("none within the wait"), std::string::npos);
}

}  // namespace
}  // namespace seqpipe::model_control
