// The gateway's typed way in for the front doors (Gateway::submit), on an injected clock, no
// sockets: a door's request runs as a msgpack client's and its replies, partials included, come
// back typed through its sink, never as bytes; a request its door's validator refused is answered
// and counted by the gateway; a door's cancel names its own request only. And the hand-over
// (Submissions): bounded, woken by its eventfd, in order.
#include <gtest/gtest.h>
#include <poll.h>

#include "gateway/gateway.h"
#include "gateway/submissions.h"
#include "seqpipe/config/config.h"

namespace seqpipe::gateway {
namespace {

const Now t0{SteadyClock::time_point{} + std::chrono::hours(1), 1'700'000'000'000'000};

class GatewaySubmitTest : public ::testing::Test {
 protected:
  GatewaySubmitTest()
      : registry_(metrics::make_registry()), stage_(*registry_, "gateway"), doors_(*registry_) {
    config::PipelineConfig c;
    c.gateway.default_timeout_ms = 1000;
    gateway_ = std::make_unique<Gateway>(c, "ipc:///tmp/results.sock", stage_, doors_);
  }
  // A door's request `id` of one text; its replies land in `replies`.
  Submission typed(const std::string& id, const std::string& text, bool stream = false) {
    protocol::Request r;
    r.id = id;
    r.texts = {text};
    r.stream = stream;
    return {std::move(r), [this](protocol::Reply&& reply) { replies.push_back(std::move(reply)); }};
  }
  stage::StageMessage result(const stage::TextItem& item, std::string text, bool partial) {
    stage::ResultItem res;
    res.request = item.request;
    res.text = std::move(text);
    res.partial = partial;
    return stage::Result{{res}};
  }

  std::shared_ptr<prometheus::Registry> registry_;
  metrics::StageMetrics stage_;
  metrics::GatewayMetrics doors_;
  std::unique_ptr<Gateway> gateway_;
  std::vector<protocol::Reply> replies;
};

TEST_F(GatewaySubmitTest, ADoorsRequestRunsAndItsRepliesComeBackTypedToItsSink) {
  Gateway& g = *gateway_;
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{1}, t0);
  g.submit(typed("http-1", "teh speling", /*stream=*/true), t0, out);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 1u);
  const stage::TextItem item = std::get<stage::Tokenize>(out.sends[0].message).items.at(0);
  EXPECT_EQ(item.text, "teh speling");
  EXPECT_TRUE(item.stream);
  g.on_results(result(item, "the ", true), t0, out);
  g.on_results(result(item, "the spelling", false), t0 + std::chrono::milliseconds(5), out);
  EXPECT_TRUE(out.replies.empty()) << "no bytes for a door";
  ASSERT_EQ(replies.size(), 3u);  // "the ", then the rest, then the final reply
  EXPECT_TRUE(replies[0].partial);
  EXPECT_EQ(replies[0].texts.at(0), "the ");
  EXPECT_EQ(replies[1].texts.at(0), "spelling");
  EXPECT_FALSE(replies[2].partial);
  EXPECT_EQ(replies[2].id, "http-1");
  EXPECT_EQ(replies[2].texts.at(0), "the spelling");
  EXPECT_EQ(replies[2].timings.total_us, 5000u);
  EXPECT_EQ(g.in_flight(), 0u);
}

TEST_F(GatewaySubmitTest, ARefusedRequestIsAnsweredAndCountedByTheGateway) {
  Gateway& g = *gateway_;
  Outbox out;
  protocol::RejectedRequest refused;
  refused.error = {protocol::ErrorCode::kInvalidArgument, "text is empty"};
  refused.id = "http-2";
  g.submit({refused, [this](protocol::Reply&& r) { replies.push_back(std::move(r)); }}, t0, out);
  protocol::Request unknown;
  unknown.id = "http-3";
  unknown.texts = {"x"};
  unknown.model = "nobody";
  g.submit({unknown, [this](protocol::Reply&& r) { replies.push_back(std::move(r)); }}, t0, out);
  EXPECT_TRUE(out.replies.empty());
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].id, "http-2");
  EXPECT_EQ(replies[0].error->message, "text is empty");
  EXPECT_EQ(replies[1].error->code, protocol::ErrorCode::kNotFound);
  const auto status = g.status();
  EXPECT_EQ(status.at(0).requests, 2);
  EXPECT_EQ(status.at(0).errors, 2);
  EXPECT_EQ(status.at(0).client_errors, 2);
}

TEST_F(GatewaySubmitTest, ADoorsCancelNamesItsOwnRequestOnly) {
  Gateway& g = *gateway_;
  Outbox out;
  g.submit(typed("grpc-1", "a"), t0, out);
  protocol::Request cancel;
  cancel.op = protocol::Op::kCancel;
  cancel.id = "grpc-1";
  // A msgpack client naming the same id cancels nothing of the door's.
  g.on_client({"client", "", protocol::encode_request(cancel)}, t0, out);
  EXPECT_EQ(g.in_flight(), 1u);
  g.submit({cancel, [](protocol::Reply&&) { FAIL() << "a cancel has no reply"; }}, t0, out);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].error->code, protocol::ErrorCode::kCancelled);
  EXPECT_EQ(g.in_flight(), 0u);
  ASSERT_EQ(out.pushes.size(), 1u);  // the batcher is told
}

TEST(SubmissionsTest, BoundedWokenAndInOrder) {
  Submissions queue(2);
  pollfd fd{queue.wake_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&fd, 1, 0), 0);
  for (const char* id : {"1", "2", "3"}) {
    protocol::Request r;
    r.id = id;
    EXPECT_EQ(queue.push({std::move(r), {}}), std::string(id) != "3") << id;
  }
  EXPECT_EQ(::poll(&fd, 1, 0), 1);
  auto taken = queue.take();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(std::get<protocol::Request>(taken[0].request).id, "1");
  EXPECT_EQ(std::get<protocol::Request>(taken[1].request).id, "2");
  EXPECT_EQ(::poll(&fd, 1, 0), 0);
  EXPECT_TRUE(queue.push({protocol::Request{}, {}}));  // room again
}

}  // namespace
}  // namespace seqpipe::gateway
