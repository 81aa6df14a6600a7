// What the gateway refuses at once, on an injected clock, no sockets (gateway_fixture.h): while
// the batcher refuses, a full queue, the in-flight limit and the pipeline's pace.
#include <gtest/gtest.h>

#include "gateway_fixture.h"

namespace seqpipe::gateway {
namespace {

TEST_F(GatewayTest, WhileTheBatcherRefusesTheGatewayRefusesAShareAtOnce) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{64}, t0);
  // Twenty requests go out (nothing refused yet: nothing is shed) and the batcher refuses them.
  // Each its own id: one id in flight twice is one request.
  auto numbered = [](const std::string& text, int i) {
    protocol::Request r = texts({text});
    r.id = text + std::to_string(i);
    return r;
  };
  for (int i = 0; i < 20; ++i) g.on_client(request("A", numbered("a", i)), t0, out);
  EXPECT_TRUE(out.replies.empty());
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 20u);
  for (const auto& send : out.sends) {
    stage::Result refused = result_for(send.message, {"A"});
    refused.items[0].error = protocol::Error{protocol::ErrorCode::kOverloaded, "full"};
    g.on_results(std::move(refused), t0, out);
  }
  ASSERT_EQ(out.replies.size(), 20u);
  out.clear();
  // Now most new requests are refused here, before any tokenizer, saying why; a few still go.
  for (int i = 0; i < 20; ++i)
    g.on_client(request("B", numbered("b", i)), t0 + milliseconds(1), out);
  int shed = 0;
  for (size_t i = 0; i < out.replies.size(); ++i) {
    const protocol::Reply r = reply_of(out, i);
    ASSERT_TRUE(r.error);
    EXPECT_EQ(r.error->code, protocol::ErrorCode::kOverloaded);
    EXPECT_NE(r.error->message.find("refused at the gateway"), std::string::npos);
    ++shed;
  }
  EXPECT_GE(shed, 12);
  EXPECT_LT(shed, 20);
  EXPECT_EQ(g.waiting(), static_cast<size_t>(20 - shed));
  // Seconds later, the counts have decayed: requests go out again.
  out.clear();
  g.on_client(request("C", texts({"c"})), t0 + std::chrono::seconds(30), out);
  EXPECT_TRUE(out.replies.empty());
}

TEST_F(GatewayTest, FullQueueAnswersOverloaded) {
  config::PipelineConfig c;
  c.batcher.max_queue_size = 2;
  Gateway& g = gateway(c);
  Outbox out;
  for (const char* client : {"A", "B", "C"}) g.on_client(request(client, texts({"x"})), t0, out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(out.replies[0].first[0], "C");
  EXPECT_EQ(reply_of(out).error->code, protocol::ErrorCode::kOverloaded);
}

TEST(InFlightLimit, CountsPerModelVersionAndRefusesBeyondTheLimit) {
  using V = InFlightLimit::Verdict;
  const SteadyClock::time_point now = t0.steady, later = now + std::chrono::hours(1);
  InFlightLimit limit(4, 2);
  EXPECT_EQ(limit.take("m/1", 3, now, later), V::kAdmit);
  EXPECT_EQ(limit.take("m/1", 2, now, later), V::kFull);  // 5 > 4: nothing counted
  EXPECT_EQ(limit.in_flight("m/1"), 3u);
  EXPECT_EQ(limit.take("m/1", 1, now, later), V::kAdmit);
  EXPECT_EQ(limit.take("m/2", 4, now, later), V::kAdmit);  // another version: its own bound
  EXPECT_EQ(limit.take("m/2", 1, now, later), V::kFull);
  limit.give_back("m/1", 2);
  EXPECT_EQ(limit.in_flight("m/1"), 2u);
  EXPECT_EQ(limit.take("m/1", 2, now, later), V::kAdmit);
  limit.give_back("m/2", 9);  // more than it holds: none left, never negative
  EXPECT_EQ(limit.in_flight("m/2"), 0u);
  limit.give_back("unknown", 1);
  EXPECT_EQ(limit.in_flight("unknown"), 0u);
}

// The pace is measured only over gaps while the pipeline was busy (>= `busy` in flight); with a
// pace, a request that could not be answered before its deadline behind those in flight is
// refused; below `busy` in flight nothing is refused on the estimate.
TEST(InFlightLimit, RefusesWhatThePipelinesPaceCannotAnswerBeforeItsDeadline) {
  using V = InFlightLimit::Verdict;
  const SteadyClock::time_point now = t0.steady;
  InFlightLimit limit(100, 4);
  // A burst on an idle pipeline: no pace yet, all in, however near the deadline.
  EXPECT_EQ(limit.take("m", 10, now, now + milliseconds(1)), V::kAdmit);
  EXPECT_FALSE(limit.wait("m"));
  limit.give_back("m", 2);
  limit.answered("m", 2, now + milliseconds(10));  // 8 still in flight: the next gap is busy
  EXPECT_FALSE(limit.wait("m"));
  limit.give_back("m", 2);
  limit.answered("m", 2, now + milliseconds(30));  // 2 in 20 ms: 10 ms a sequence
  ASSERT_TRUE(limit.wait("m"));
  EXPECT_EQ(*limit.wait("m"), milliseconds(70));  // 6 in flight + this one
  const SteadyClock::time_point t = now + milliseconds(30);
  EXPECT_EQ(limit.take("m", 1, t, t + milliseconds(50)), V::kTooLate);
  EXPECT_EQ(limit.in_flight("m"), 6u);
  EXPECT_EQ(limit.take("m", 1, t, t + milliseconds(100)), V::kAdmit);
  // Light load: below `busy` in flight the estimate refuses nothing, and the gaps after an
  // answer that left the pipeline idle-ish are the arrivals', not sampled.
  limit.give_back("m", 5);
  limit.answered("m", 5, t + milliseconds(40));
  EXPECT_EQ(limit.take("m", 1, t, t + milliseconds(1)), V::kAdmit);
  limit.give_back("m", 1);
  limit.answered("m", 1, t + std::chrono::seconds(5));
  // 9.75 ms a sequence (the busy gap of 40 ms for 5, 8 ms each, weighed in at 1/8), the 5 s gap
  // not sampled; its deviation of 2 ms from 10 weighed in the same: a spread of 0.25 ms, planned
  // with kPaceSpreads of it. 2 in flight + 1.
  EXPECT_EQ(*limit.wait("m"),
            std::chrono::microseconds(3 * (9750 + 250 * static_cast<int>(kPaceSpreads))));
}

// Gaps that vary about the same mean leave the pace there but widen its spread: what is admitted
// is planned at the slower pace, so fewer requests wait than the mean alone would let in.
TEST(InFlightLimit, ASpreadOfPacesAdmitsLessThanTheMeanAlone) {
  using V = InFlightLimit::Verdict;
  // In flight once the gaps were measured and as many more taken as a 2 s deadline allows.
  auto admitted = [](milliseconds odd, milliseconds even) {
    SteadyClock::time_point t = t0.steady;
    InFlightLimit limit(1000, 1);
    EXPECT_EQ(limit.take("m", 20, t, t + std::chrono::hours(1)), V::kAdmit);
    for (int i = 0; i < 80; ++i) {  // one sequence answered per gap, one taken in its place
      t += i % 2 ? odd : even;
      limit.give_back("m", 1);
      limit.answered("m", 1, t);
      EXPECT_EQ(limit.take("m", 1, t, t + std::chrono::hours(1)), V::kAdmit);
    }
    while (limit.take("m", 1, t, t + std::chrono::seconds(2)) == V::kAdmit) {
    }
    return limit.in_flight("m");
  };
  EXPECT_EQ(admitted(milliseconds(10), milliseconds(10)), 200u);  // 2 s at 10 ms a sequence
  // The same mean, 10 ms, deviating 8 ms: planned at about 10 + 2 x 8.5 ms.
  const size_t varying = admitted(milliseconds(2), milliseconds(18));
  EXPECT_GT(varying, 60u);
  EXPECT_LT(varying, 90u);
}

// What is in the pipeline counts, not only what waits here: with max_queue_size sequences of a
// model at its tokenizers and batcher, the next request is refused at once (the batcher would
// refuse it after the trip), and one answer makes room again.
TEST_F(GatewayTest, AModelsSequencesInFlightAreBoundedByTheBatchersQueue) {
  config::PipelineConfig c;
  c.batcher.max_queue_size = 3;
  Gateway& g = gateway(c);
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{64}, t0);
  g.on_client(request("A", texts({"a", "b"})), t0, out);
  g.on_client(request("B", texts({"c"})), t0, out);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 2u);  // both at the tokenizer: nothing waits at the gateway
  EXPECT_EQ(g.waiting(), 0u);
  ASSERT_TRUE(out.replies.empty());
  g.on_client(request("C", texts({"d"})), t0, out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(out.replies[0].first[0], "C");
  const protocol::Reply refused = reply_of(out);
  ASSERT_TRUE(refused.error);
  EXPECT_EQ(refused.error->code, protocol::ErrorCode::kOverloaded);
  EXPECT_NE(refused.error->message.find("batcher.max_queue_size = 3"), std::string::npos);
  EXPECT_EQ(g.in_flight(), 2u);
  // B's answer frees its sequence: the next request goes in.
  g.on_results(result_for(out.sends[1].message, {"C"}), t0, out);
  ASSERT_EQ(out.replies.size(), 2u);
  EXPECT_TRUE(reply_of(out, 1).ok);
  g.on_client(request("D", texts({"e"})), t0, out);
  EXPECT_EQ(out.replies.size(), 2u);
  EXPECT_EQ(g.in_flight(), 2u);
}

}  // namespace
}  // namespace seqpipe::gateway
