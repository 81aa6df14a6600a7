// The gateway's logic on an injected clock, no sockets (gateway_fixture.h): credit-gated
// dispatch, deadlines, exactly one reply per request (ok, error, deadline), late results
// dropped, priorities, cancels.
#include <gtest/gtest.h>

#include "gateway_fixture.h"

namespace seqpipe::gateway {
namespace {

protocol::Request cancel_of(const std::string& id) {
  protocol::Request r;
  r.op = protocol::Op::kCancel;
  r.id = id;
  return r;
}

TEST_F(GatewayTest, WorkGoesOutOnlyWithTokenizerCredit) {
  Gateway& g = gateway();
  Outbox out;
  g.on_client(request("A", texts({"x"})), t0, out);
  g.on_client(request("B", texts({"y"})), t0, out);
  g.dispatch(t0, out);
  EXPECT_TRUE(out.sends.empty());  // no tokenizer yet
  EXPECT_EQ(g.waiting(), 2u);
  g.on_tokenizer("tok1", stage::Ready{1}, t0);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 1u);  // one credit, one message
  EXPECT_EQ(out.sends[0].peer, "tok1");
  EXPECT_EQ(work_of(out.sends[0].message).items.at(0).text, "x");
  EXPECT_EQ(work_of(out.sends[0].message).items.at(0).gateway, "ipc:///tmp/results.sock");
  g.on_tokenizer("tok1", stage::Credit{1}, t0);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 2u);
  EXPECT_EQ(work_of(out.sends[1].message).items.at(0).text, "y");
}

TEST_F(GatewayTest, ItemsCarryTheDeadlineOfTheMomentGivenOnTheWallClock) {
  Gateway& g = gateway();  // default timeout 1000 ms
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{1}, t0);
  protocol::Request r = texts({"a"});
  r.timeout_ms = 250;
  g.on_client(request("A", r), t0 + milliseconds(10), out);
  g.dispatch(t0 + milliseconds(10), out);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(work_of(out.sends[0].message).items.at(0).deadline,
            Deadline::after(t0 + milliseconds(10), milliseconds(250)));
  EXPECT_EQ(g.next_deadline(), (t0 + milliseconds(260)).steady);
  out.clear();
  g.on_client(request("A", cancel_of("c1")), t0 + milliseconds(20), out);
  ASSERT_EQ(out.pushes.size(), 1u);  // the batcher forgets the cancel at the same instant
  EXPECT_EQ(std::get<stage::Cancel>(out.pushes[0].second).requests.at(0).deadline,
            Deadline::after(t0 + milliseconds(10), milliseconds(250)));
}

TEST_F(GatewayTest, AllResultsMakeOneOkReplyInIndexOrder) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{4}, t0);
  g.on_client(request("A", texts({"a", "b", "c"}, true)), t0, out);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 1u);
  stage::Result result = result_for(out.sends[0].message, {"A", "B", "C"});
  std::swap(result.items[0], result.items[2]);  // results arrive in any order
  stage::Result first{{result.items[0]}};
  stage::Result rest{{result.items[1], result.items[2]}};
  g.on_results(std::move(first), t0 + milliseconds(5), out);
  EXPECT_TRUE(out.replies.empty());
  g.on_results(std::move(rest), t0 + milliseconds(7), out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(out.replies[0].first, (Envelope{"A", ""}));
  const protocol::Reply r = reply_of(out);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.id, "c1");
  EXPECT_EQ(r.texts, (std::vector<std::string>{"A", "B", "C"}));
  ASSERT_TRUE(r.scores.has_value());
  EXPECT_FLOAT_EQ((*r.scores)[2], -1.5f);
  // Each text's usage, as its result said (the swap above undone by index).
  EXPECT_EQ(r.usage, (std::vector<protocol::Usage>{{2, 10, protocol::FinishReason::kEos},
                                                   {3, 20, protocol::FinishReason::kLength},
                                                   {4, 30, protocol::FinishReason::kStop}}));
  EXPECT_EQ(r.timings.total_us, 7000u);
  EXPECT_EQ(r.timings.encode_us, 100u);
  EXPECT_EQ(g.in_flight(), 0u);
}

TEST_F(GatewayTest, NoScoresUnlessAsked) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{4}, t0);
  g.on_client(request("A", texts({"a"})), t0, out);
  g.dispatch(t0, out);
  g.on_results(result_for(out.sends[0].message, {"A"}), t0, out);
  EXPECT_FALSE(reply_of(out).scores.has_value());
}

TEST_F(GatewayTest, DeadlineAnswersOnceAndTheLateResultIsDropped) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{4}, t0);
  g.on_client(request("A", texts({"a"})), t0, out);
  g.dispatch(t0, out);
  const stage::StageMessage work = out.sends[0].message;
  EXPECT_EQ(g.next_deadline(), (t0 + milliseconds(1000)).steady);
  g.expire(t0 + milliseconds(999), out);
  EXPECT_TRUE(out.replies.empty());
  g.expire(t0 + milliseconds(1000), out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).error->code, protocol::ErrorCode::kDeadlineExceeded);
  // It says where the deadline came from and how a client sets its own.
  EXPECT_EQ(reply_of(out).error->message,
            "no result within 1000 ms (gateway.default_timeout_ms; timeout_ms or HTTP's "
            "X-Request-Timeout per request)");
  g.on_results(result_for(work, {"A"}), t0 + milliseconds(1200), out);
  g.expire(t0 + milliseconds(5000), out);
  EXPECT_EQ(out.replies.size(), 1u);
  EXPECT_FALSE(g.next_deadline().has_value());
}

TEST_F(GatewayTest, AFailedItemAnswersTheRequestWithItsCodeOnce) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{4}, t0);
  g.on_client(request("A", texts({"a", "b"})), t0, out);
  g.dispatch(t0, out);
  stage::Result result = result_for(out.sends[0].message, {"A", "B"});
  result.items[0].error = protocol::Error{protocol::ErrorCode::kTooLong, "text 0 is 300 tokens"};
  g.on_results(std::move(result), t0, out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).error->code, protocol::ErrorCode::kTooLong);
  EXPECT_EQ(reply_of(out).error->message, "text 0 is 300 tokens");
}

TEST_F(GatewayTest, BadRequestsAreAnsweredAtOnce) {
  config::PipelineConfig c;
  c.decoder.max_new_tokens = 16;
  Gateway& g = gateway(c);
  Outbox out;
  g.on_client({"A", "", "\xc1"}, t0, out);
  protocol::Request too_many = texts({"a"});
  too_many.params.max_new_tokens = 17;  // above decoder.max_new_tokens
  g.on_client(request("B", too_many), t0, out);
  ASSERT_EQ(out.replies.size(), 2u);
  EXPECT_EQ(reply_of(out, 0).error->code, protocol::ErrorCode::kInvalidArgument);
  EXPECT_EQ(reply_of(out, 0).id, "");
  EXPECT_EQ(reply_of(out, 1).error->code, protocol::ErrorCode::kInvalidArgument);
  EXPECT_EQ(reply_of(out, 1).id, "c1");
  EXPECT_EQ(g.in_flight(), 0u);
}

TEST_F(GatewayTest, PriorityIsPassedOnAndAnUnknownLevelIsAnsweredAtOnce) {
  config::PipelineConfig c;
  c.batcher.priority_levels = 2;
  Gateway& g = gateway(c);
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{4}, t0);
  protocol::Request urgent = texts({"a"});
  urgent.params.priority = 1;
  g.on_client(request("A", urgent), t0, out);
  protocol::Request unknown = texts({"b"});
  unknown.id = "c2";
  unknown.params.priority = 3;
  g.on_client(request("A", unknown), t0, out);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(work_of(out.sends[0].message).items.at(0).params.priority, 1);
  ASSERT_EQ(out.replies.size(), 1u);
  const protocol::Reply r = reply_of(out);
  EXPECT_EQ(r.id, "c2");
  EXPECT_EQ(r.error->code, protocol::ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error->message,
            "params.priority must be an integer in [1, 2], got 3 (1 is the highest of the server's "
            "2 priority levels)");
}

TEST_F(GatewayTest, ACancelAnswersTheRequestCancelledOnceAndTellsTheBatcher) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{4}, t0);
  g.on_client(request("A", texts({"a", "b"})), t0, out);
  g.dispatch(t0, out);
  const stage::StageMessage work = out.sends.at(0).message;
  out.clear();
  // Another client's cancel of the same id, and this client's cancel of another id: nothing.
  g.on_client(request("B", cancel_of("c1")), t0 + milliseconds(10), out);
  g.on_client(request("A", cancel_of("c2")), t0 + milliseconds(10), out);
  EXPECT_TRUE(out.replies.empty());
  EXPECT_TRUE(out.pushes.empty());
  EXPECT_EQ(g.in_flight(), 1u);

  g.on_client(request("A", cancel_of("c1")), t0 + milliseconds(20), out);
  ASSERT_EQ(out.replies.size(), 1u);  // the cancelled request's reply; the cancel has none
  EXPECT_EQ(out.replies[0].first, (Envelope{"A", ""}));
  const protocol::Reply r = reply_of(out);
  EXPECT_EQ(r.id, "c1");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error->code, protocol::ErrorCode::kCancelled);
  EXPECT_EQ(r.timings.total_us, 20000u);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(stage::kind(out.pushes[0].second), stage::MessageKind::kCancel);
  const auto& cancelled = std::get<stage::Cancel>(out.pushes[0].second).requests;
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0].request, work_of(work).items[0].request);
  EXPECT_EQ(cancelled[0].gateway, "ipc:///tmp/results.sock");
  EXPECT_GT(cancelled[0].deadline.unix_us(), 0);
  EXPECT_EQ(g.in_flight(), 0u);
  EXPECT_FALSE(g.next_deadline().has_value());

  // Results still on their way, a second cancel and the deadline: no second reply.
  out.clear();
  g.on_results(result_for(work, {"A", "B"}), t0 + milliseconds(30), out);
  g.on_client(request("A", cancel_of("c1")), t0 + milliseconds(40), out);
  g.expire(t0 + milliseconds(5000), out);
  EXPECT_TRUE(out.replies.empty());
  EXPECT_TRUE(out.pushes.empty());
}

TEST_F(GatewayTest, ACancelAfterTheReplyIsIgnoredAndAMalformedCancelIsAnswered) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{4}, t0);
  g.on_client(request("A", texts({"a"})), t0, out);
  g.dispatch(t0, out);
  g.on_results(result_for(out.sends.at(0).message, {"A"}), t0, out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_TRUE(reply_of(out).ok);
  out.clear();
  g.on_client(request("A", cancel_of("c1")), t0, out);
  EXPECT_TRUE(out.replies.empty());
  EXPECT_TRUE(out.pushes.empty());
  g.on_client({"A", "",
               "\x83\xa1v\x01\xa2op\xa6"
               "cancel\xa4text\xa1x"},
              t0, out);  // cancel with a text
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).error->code, protocol::ErrorCode::kInvalidArgument);
  EXPECT_TRUE(out.pushes.empty());
}

}  // namespace
}  // namespace seqpipe::gateway
