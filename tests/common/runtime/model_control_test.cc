// The model control messages: their codecs, and the catalog's round trip to a hub's worker socket
// (hub::read_workers) and the control request's to a ROUTER, over real sockets.
#include "seqpipe/runtime/model_control.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "seqpipe/runtime/hub.h"

namespace seqpipe::model_control {
namespace {

using std::chrono::milliseconds;

TEST(ModelControl, CatalogAndInFlightRoundTrip) {
  const std::vector<config::ModelVersion> models = {{"alpha", 1, "/r/alpha/1"},
                                                    {"beta", 12, "/r/beta"}};
  EXPECT_EQ(decode_catalog(encode_catalog(models)), models);
  EXPECT_EQ(decode_catalog(encode_catalog({})), std::vector<config::ModelVersion>{});
  const InFlight in_flight = {{"alpha/1", 3}, {"beta/12", 0}};
  EXPECT_EQ(decode_in_flight(encode_in_flight(in_flight)), in_flight);
}

TEST(ModelControl, BadCatalogsAreRefused) {
  EXPECT_FALSE(decode_catalog("\x93").has_value());                          // an array cut short
  EXPECT_FALSE(decode_catalog(encode_in_flight({{"a/1", 1}})).has_value());  // a map
  EXPECT_FALSE(decode_catalog(encode_catalog({{"../x", 1, "/r"}})).has_value());  // a bad name
}

TEST(ModelControl, RequestsAndRepliesRoundTrip) {
  for (const ControlRequest& r :
       {ControlRequest{Op::kIndex, "", std::nullopt}, ControlRequest{Op::kLoad, "alpha", 2},
        ControlRequest{Op::kUnload, "alpha", std::nullopt}}) {
    const auto decoded = decode_request(encode(r));
    ASSERT_TRUE(std::holds_alternative<ControlRequest>(decoded));
    EXPECT_EQ(std::get<ControlRequest>(decoded), r);
  }
  const ControlReply reply{protocol::Error{protocol::ErrorCode::kNotFound, "no 'x'"},
                           {{"alpha", 1, State::kReady, ""},
                            {"alpha", 2, State::kUnavailable, "unloaded"},
                            {"beta", 1, State::kUnloading, ""}}};
  EXPECT_EQ(decode_reply(encode(reply)), reply);
  EXPECT_EQ(decode_reply(encode(ControlReply{})), ControlReply{});
}

TEST(ModelControl, ABadRequestSaysWhy) {
  auto why = [](const ControlRequest& r) {
    return std::get<std::string>(decode_request(encode(r)));
  };
  EXPECT_EQ(why({Op::kLoad, "", std::nullopt}), "'' is not a model name");
  EXPECT_EQ(why({Op::kUnload, "a/b", 1}), "'a/b' is not a model name");
  EXPECT_NE(std::get<std::string>(decode_request("\xc1")).find("not a control request"),
            std::string::npos);
}

TEST(ModelControl, AHubAnswersTheCatalogWithItsHandlerOverRealSockets) {
  zmq::context_t context(1);
  transport::Socket hub(context, zmq::socket_type::router);
  const std::string endpoint = hub.bind("tcp://127.0.0.1:*");
  auto registry = metrics::make_registry();
  metrics::StageMetrics metrics(*registry, "gateway");
  std::vector<config::ModelVersion> received;
  std::atomic<bool> done = false;
  std::thread serving([&] {
    while (!done) {
      hub::read_workers(
          hub, "test", stage::Limits{}, metrics, [] { return std::vector<status::StageStatus>{}; },
          [](const std::string&, stage::StageMessage&&) {},
          [&](std::string_view bytes) {
            received = decode_catalog(bytes).value_or(std::vector<config::ModelVersion>{});
            return encode_in_flight({{"alpha/2", 4}});
          });
      std::this_thread::sleep_for(milliseconds(5));
    }
  });
  const auto answer =
      send_catalog(context, endpoint, {{"alpha", 2, "/r/alpha/2"}}, milliseconds(5000), {});
  done = true;
  serving.join();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(*answer, (InFlight{{"alpha/2", 4}}));
  EXPECT_EQ(received, (std::vector<config::ModelVersion>{{"alpha", 2, "/r/alpha/2"}}));
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
