// The gateway's dead and restarted workers, on an injected clock, no sockets (gateway_fixture.h):
// dead tokenizers' work re-sent once, a silent batcher's requests to another, heartbeats.
#include <gtest/gtest.h>

#include "gateway_fixture.h"

namespace seqpipe::gateway {
namespace {

TEST_F(GatewayTest, ADeadTokenizersWorkGoesToAnotherOnceThenUnavailable) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("t1", stage::Ready{1}, t0);
  g.on_client(request("A", texts({"a"})), t0, out);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.at(0).peer, "t1");
  g.on_tokenizer("t2", stage::Ready{1}, t0 + milliseconds(200));
  out.clear();
  g.tick(t0 + milliseconds(301), out);  // t1 silent for 3 intervals: dead
  g.dispatch(t0 + milliseconds(301), out);
  std::vector<std::pair<std::string, std::string>> sent;
  for (const auto& [link, w, m] : out.sends) {
    if (auto* t = std::get_if<stage::Tokenize>(&m)) sent.emplace_back(w, t->items.at(0).text);
  }
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0], (std::pair<std::string, std::string>{"t2", "a"}));
  EXPECT_TRUE(out.replies.empty());
  out.clear();
  g.tokenizer_dead("t2", t0 + milliseconds(400), out);  // lost a second time
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).error->code, protocol::ErrorCode::kUnavailable);
}

TEST_F(GatewayTest, WithTwoBatchersASilentOnesRequestsGoToTheOtherOnceOrWaitForOneToComeBack) {
  config::PipelineConfig c;
  c.gateway.batcher_endpoints = {"ipc:///tmp/b1.sock", "ipc:///tmp/b2.sock"};
  Gateway& g = gateway(c);  // heartbeats every 100 ms, dead after 300 ms
  Outbox out;
  auto batcher_heartbeat = [&](const std::string& endpoint, const Now& at) {
    g.on_results(stage::Heartbeat{endpoint}, at, out);
  };
  auto tokenize_sent = [&] {  // (text, batcher) of the tokenize items in the outbox
    std::vector<std::pair<std::string, std::string>> v;
    for (const auto& [link, w, m] : out.sends) {
      if (auto* t = std::get_if<stage::Tokenize>(&m))
        v.emplace_back(t->items.at(0).text, t->items.at(0).batcher);
    }
    return v;
  };
  using Sent = std::vector<std::pair<std::string, std::string>>;
  g.on_tokenizer("tok", stage::Ready{8}, t0);
  g.tick(t0, out);
  ASSERT_EQ(out.pushes.size(), 2u);  // a heartbeat to each, naming where to answer
  EXPECT_EQ(out.pushes[0].first, "ipc:///tmp/b1.sock");
  EXPECT_EQ(out.pushes[1].first, "ipc:///tmp/b2.sock");
  EXPECT_EQ(stage::kind(out.pushes[1].second), stage::MessageKind::kHeartbeat);
  EXPECT_EQ(std::get<stage::Heartbeat>(out.pushes[1].second).from, "ipc:///tmp/results.sock");
  protocol::Request r1 = texts({"a"}), r2 = texts({"b"}), r3 = texts({"c"});
  r2.id = "c2";
  r3.id = "c3";
  g.on_client(request("A", r1), t0, out);
  g.on_client(request("A", r2), t0, out);
  g.dispatch(t0, out);
  EXPECT_EQ(tokenize_sent(),
            (Sent{{"a", "ipc:///tmp/b2.sock"}, {"b", "ipc:///tmp/b1.sock"}}));  // round-robin
  // b1 answers heartbeats; b2 stays silent and is declared dead: its request goes to b1, once.
  batcher_heartbeat("ipc:///tmp/b1.sock", t0 + milliseconds(250));
  g.on_tokenizer("tok", stage::Heartbeat{}, t0 + milliseconds(250));
  out.clear();
  g.tick(t0 + milliseconds(301), out);
  g.dispatch(t0 + milliseconds(301), out);
  EXPECT_EQ(tokenize_sent(), (Sent{{"a", "ipc:///tmp/b1.sock"}}));
  EXPECT_TRUE(out.replies.empty());
  EXPECT_EQ(g.live_batchers(), 1u);
  out.clear();
  g.on_client(request("A", r3), t0 + milliseconds(310), out);
  g.dispatch(t0 + milliseconds(310), out);
  EXPECT_EQ(tokenize_sent(), (Sent{{"c", "ipc:///tmp/b1.sock"}}));
  // Then b1 falls silent too: no batcher is left. The request it got a second time is answered
  // unavailable; the others wait for a batcher to come back.
  out.clear();
  g.on_tokenizer("tok", stage::Heartbeat{}, t0 + milliseconds(500));
  g.tick(t0 + milliseconds(551), out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).error->code, protocol::ErrorCode::kUnavailable);
  EXPECT_EQ(reply_of(out).error->message, "two batchers failed on this request");
  EXPECT_EQ(g.in_flight(), 2u);
  out.clear();
  g.on_client(request("B", r1), t0 + milliseconds(560), out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).error->message, "no batcher is live; retry later");
  // b2 comes back (restarted): the waiting requests go to it, and it takes new work.
  out.clear();
  batcher_heartbeat("ipc:///tmp/b2.sock", t0 + milliseconds(600));
  g.on_tokenizer("tok", stage::Heartbeat{}, t0 + milliseconds(600));
  g.on_client(request("B", r2), t0 + milliseconds(600), out);
  g.dispatch(t0 + milliseconds(600), out);
  EXPECT_EQ(tokenize_sent(), (Sent{{"b", "ipc:///tmp/b2.sock"},
                                   {"c", "ipc:///tmp/b2.sock"},
                                   {"b", "ipc:///tmp/b2.sock"}}));
  EXPECT_TRUE(out.replies.empty());
}

TEST_F(GatewayTest, ALoneBatchersRestartSubmitsWhatItHeldAgainOnce) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{8}, t0);
  g.tick(t0, out);
  ASSERT_EQ(out.pushes.size(), 1u);  // heartbeats to the one batcher too
  EXPECT_EQ(stage::kind(out.pushes[0].second), stage::MessageKind::kHeartbeat);
  const std::string ingress = out.pushes[0].first;
  out.clear();
  g.on_results(stage::Heartbeat{ingress, 7}, t0, out);
  protocol::Request two = texts({"a", "b"});
  g.on_client(request("A", two), t0, out);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 1u);
  const stage::StageMessage first = out.sends[0].message;
  // "a" is answered; then the batcher restarts (a new incarnation) and loses "b".
  stage::Result a = result_for(first, {"A", "B"});
  a.items.pop_back();
  g.on_results(std::move(a), t0 + milliseconds(20), out);
  out.clear();
  g.on_results(stage::Heartbeat{ingress, 8}, t0 + milliseconds(50), out);
  g.dispatch(t0 + milliseconds(50), out);
  ASSERT_EQ(out.sends.size(), 1u) << "submitted again";
  const auto& again = work_of(out.sends[0].message);
  ASSERT_EQ(again.items.size(), 1u) << "only the text not answered yet";
  EXPECT_EQ(again.items[0].text, "b");
  EXPECT_EQ(again.items[0].request, work_of(first).items[0].request);
  EXPECT_TRUE(out.replies.empty());
  g.on_results(result_for(out.sends[0].message, {"B"}), t0 + milliseconds(60), out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).texts, (std::vector<std::string>{"A", "B"}));
  // A second restart with a request in flight: it is lost twice, answered unavailable.
  out.clear();
  g.on_client(request("A", texts({"c"})), t0 + milliseconds(70), out);
  g.on_results(stage::Heartbeat{ingress, 9}, t0 + milliseconds(80), out);
  EXPECT_TRUE(out.replies.empty()) << "the first loss: submitted again";
  g.on_results(stage::Heartbeat{ingress, 10}, t0 + milliseconds(90), out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).error->code, protocol::ErrorCode::kUnavailable);
}

TEST_F(GatewayTest, HeartbeatsGoToEveryTokenizerOncePerInterval) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("t1", stage::Ready{1}, t0);
  g.on_tokenizer("t2", stage::Ready{1}, t0);
  g.tick(t0 + milliseconds(10), out);
  g.tick(t0 + milliseconds(50), out);
  ASSERT_EQ(out.sends.size(), 2u);
  for (const auto& [link, w, m] : out.sends)
    EXPECT_EQ(stage::kind(m), stage::MessageKind::kHeartbeat);
  const auto status = g.status();
  EXPECT_EQ(status.at(1).stage, "tokenizer");
  EXPECT_EQ(status.at(1).replicas, 2);
}

TEST_F(GatewayTest, WorkWaitingForATokenizerIsDroppedOnceItsDeadlinePassed) {
  Gateway& g = gateway();
  Outbox out;
  g.on_client(request("A", texts({"a"})), t0, out);
  g.expire(t0 + milliseconds(1000), out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).error->code, protocol::ErrorCode::kDeadlineExceeded);
  g.on_tokenizer("tok", stage::Ready{1}, t0 + milliseconds(1001));
  g.dispatch(t0 + milliseconds(1001), out);
  EXPECT_TRUE(out.sends.empty());  // answered already: no tokenizer spends time on it
  EXPECT_EQ(g.waiting(), 0u);
  EXPECT_EQ(g.status().at(1).free_credits, 1);
}

TEST_F(GatewayTest, ADeadTokenizerWithNoOtherLeftAnswersUnavailableAndItsCreditIsIgnored) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("t1", stage::Ready{1}, t0);
  g.on_client(request("A", texts({"a"})), t0, out);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 1u);
  out.clear();
  g.tokenizer_dead("t1", t0 + milliseconds(1), out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).error->code, protocol::ErrorCode::kUnavailable);
  EXPECT_EQ(g.in_flight(), 0u);
  // The dead tokenizer still talks: its credit does not bring it back.
  g.on_tokenizer("t1", stage::Credit{1}, t0 + milliseconds(2));
  g.on_client(request("B", texts({"b"})), t0 + milliseconds(2), out);
  g.dispatch(t0 + milliseconds(2), out);
  EXPECT_TRUE(out.sends.empty());
  EXPECT_EQ(g.waiting(), 1u);
  EXPECT_EQ(g.status().at(1).replicas, 0);
}

}  // namespace
}  // namespace seqpipe::gateway
