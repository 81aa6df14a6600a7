// The gateway's logic on an injected clock, no sockets: credit-gated dispatch, exactly one
// reply per request (ok, error, deadline), late results dropped, dead tokenizers' work re-sent.
#include "gateway/gateway.h"

#include <gtest/gtest.h>

namespace seqpipe::gateway {
namespace {

using std::chrono::milliseconds;
// The test's moment zero, on both clocks: the gateway reads no clock of its own.
const Now t0{SteadyClock::time_point{} + std::chrono::hours(1), 1'700'000'000'000'000};

protocol::Request cancel_of(const std::string& id);

class GatewayTest : public ::testing::Test {
 protected:
  GatewayTest()
      : registry_(metrics::make_registry()),
        stage_(*registry_, "gateway"),
        gw_metrics_(*registry_) {}

  Gateway& gateway(config::PipelineConfig c = {}) {
    c.gateway.default_timeout_ms = 1000;
    c.liveness.heartbeat_interval_ms = 100;
    c.liveness.heartbeat_liveness = 3;
    gateway_ = std::make_unique<Gateway>(c, "ipc:///tmp/results.sock", stage_, gw_metrics_);
    return *gateway_;
  }
  static std::vector<std::string> request(const std::string& client, protocol::Request r) {
    return {client, "", protocol::encode_request(r)};
  }
  static protocol::Request texts(std::vector<std::string> t, bool scores = false) {
    protocol::Request r;
    r.id = "c1";
    r.texts = std::move(t);
    r.batch_form = r.texts.size() > 1;
    r.params.return_scores = scores;
    return r;
  }
  static protocol::Reply reply_of(const Outbox& out, size_t i = 0) {
    const std::string& bytes = out.replies.at(i).second;
    auto r = protocol::decode_reply(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    return std::get<protocol::Reply>(r);
  }
  static const stage::Tokenize& work_of(const stage::StageMessage& m) {
    return std::get<stage::Tokenize>(m);
  }
  // The finish reason result_for gives item i: kReasons[i % 3].
  static constexpr protocol::FinishReason kReasons[] = {
      protocol::FinishReason::kEos, protocol::FinishReason::kLength, protocol::FinishReason::kStop};
  static stage::Result result_for(const stage::StageMessage& work,
                                  const std::vector<std::string>& texts) {
    stage::Result result;
    for (const auto& item : work_of(work).items) {
      const size_t i = result.items.size();
      stage::ResultItem r;
      r.request = item.request;
      r.index = item.index;
      r.text = texts[i];
      r.score = -0.5f * static_cast<float>(i + 1);
      r.timings = item.timings;
      r.prompt_tokens = static_cast<uint32_t>(i + 2);
      r.completion_tokens = static_cast<uint32_t>(10 * (i + 1));
      r.finish_reason = kReasons[i % 3];
      result.items.push_back(std::move(r));
      result.items[i].timings.encode_us = 100;
    }
    return result;
  }

  std::shared_ptr<prometheus::Registry> registry_;
  metrics::StageMetrics stage_;
  metrics::GatewayMetrics gw_metrics_;
  std::unique_ptr<Gateway> gateway_;
};

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

// A streamed request: each partial result sends what it adds to the text sent so far (a stale
// or shrinking one sends nothing), the rest goes as a last partial, then the final reply; the
// partials add up to the final text.
TEST_F(GatewayTest, AStreamedRequestGetsPartialRepliesThatAddUpToItsText) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{1}, t0);
  protocol::Request r = texts({"teh speling is bad"});
  r.stream = true;
  g.on_client(request("A", r), t0, out);
  g.dispatch(t0, out);
  const stage::TextItem item = work_of(out.sends.at(0).message).items.at(0);
  EXPECT_TRUE(item.stream);
  auto result = [&](std::string text, bool partial) {
    stage::ResultItem res;
    res.request = item.request;
    res.text = std::move(text);
    res.partial = partial;
    return stage::StageMessage(stage::Result{{res}});
  };
  out.clear();
  for (const char* text : {"the ", "the spelling ", "the ", "the spelling ", "a "})
    g.on_results(result(text, true), t0, out);
  g.on_results(result("the spelling is bad", false), t0, out);
  g.on_results(result("the spelling is bad more", true), t0, out);  // after the final: dropped
  ASSERT_EQ(out.replies.size(), 4u);
  std::string streamed;
  for (size_t i = 0; i < 3; ++i) {
    const protocol::Reply partial = reply_of(out, i);
    EXPECT_TRUE(partial.partial);
    EXPECT_EQ(partial.id, "c1");
    EXPECT_EQ(out.replies[i].first, (Envelope{"A", ""}));
    streamed += partial.texts.at(0);
  }
  EXPECT_EQ(reply_of(out, 1).texts.at(0), "spelling ");
  const protocol::Reply final_reply = reply_of(out, 3);
  EXPECT_FALSE(final_reply.partial);
  EXPECT_EQ(final_reply.texts.at(0), "the spelling is bad");
  EXPECT_EQ(streamed, final_reply.texts.at(0));
  EXPECT_EQ(g.in_flight(), 0u);
}

// A model whose postprocessor rewrites words (the bundled speller) streams too: its text goes in
// pieces (gateway.split_words) as without `stream`, each piece's partials (its final words) go
// out once the pieces before it are done, with the bytes between pieces, and they add up to the
// joined text.
TEST_F(GatewayTest, AStreamOfASplitTextSendsEachPieceInTurnAndAddsUpToTheJoinedText) {
  config::PipelineConfig c;
  c.postprocessor.known_words = "/some/words.txt";
  c.gateway.split_words = 2;
  Gateway& g = gateway(c);
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{4}, t0);
  protocol::Request r = texts({"one two three four"});
  r.stream = true;
  g.on_client(request("A", r), t0, out);
  g.dispatch(t0, out);
  ASSERT_TRUE(out.replies.empty());  // not refused
  std::vector<stage::TextItem> items;
  for (const auto& send : out.sends)
    for (const auto& i : work_of(send.message).items) items.push_back(i);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].text, "one two");
  EXPECT_EQ(items[1].text, "three four");
  EXPECT_TRUE(items[0].stream && items[1].stream);  // the pipeline sends partials
  auto result = [&](uint32_t index, std::string text, bool partial) {
    stage::ResultItem res;
    res.request = items[index].request;
    res.index = index;
    res.text = std::move(text);
    res.partial = partial;
    return stage::StageMessage(stage::Result{{res}});
  };
  out.clear();
  g.on_results(result(1, "THREE ", true), t0, out);  // its piece waits for the first
  EXPECT_TRUE(out.replies.empty());
  g.on_results(result(0, "ONE ", true), t0, out);
  g.on_results(result(0, "ONE TWO", false), t0, out);
  g.on_results(result(1, "THREE FOUR", false), t0, out);
  ASSERT_EQ(out.replies.size(), 4u);
  std::vector<std::string> pieces;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(reply_of(out, i).partial);
    pieces.push_back(reply_of(out, i).texts.at(0));
  }
  EXPECT_EQ(pieces, (std::vector<std::string>{"ONE ", "TWO THREE ", "FOUR"}));
  EXPECT_FALSE(reply_of(out, 3).partial);
  EXPECT_EQ(reply_of(out, 3).texts.at(0), "ONE TWO THREE FOUR");
  EXPECT_EQ(g.in_flight(), 0u);
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

TEST_F(GatewayTest, WhileTheBatcherRefusesTheGatewayRefusesAShareAtOnce) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{64}, t0);
  // Twenty requests go out (nothing refused yet: nothing is shed) and the batcher refuses them.
  for (int i = 0; i < 20; ++i) g.on_client(request("A", texts({"a"})), t0, out);
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
  for (int i = 0; i < 20; ++i) g.on_client(request("B", texts({"b"})), t0 + milliseconds(1), out);
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

protocol::Request cancel_of(const std::string& id) {
  protocol::Request r;
  r.op = protocol::Op::kCancel;
  r.id = id;
  return r;
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

namespace seqpipe::gateway {
namespace {

class GatewaySplitTest : public GatewayTest {};

TEST_F(GatewaySplitTest, ALongTextGoesInPiecesAndComesBackJoinedAsOneText) {
  config::PipelineConfig c;
  c.gateway.split_words = 3;
  c.gateway.cache_bytes = 1 << 20;
  Gateway& g = gateway(c);
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{2}, t0);
  const std::string long_text = "Teh cat sat.\n\nIt was  hapy and glad. ";
  g.on_client(request("A", texts({"short one", long_text}, true)), t0, out);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 1u);
  std::vector<std::string> sent;
  for (const auto& item : work_of(out.sends[0].message).items) sent.push_back(item.text);
  EXPECT_EQ(sent,
            (std::vector<std::string>{"short one", "Teh cat sat.", "It was", "hapy and glad."}));
  g.on_results(
      result_for(out.sends[0].message, {"short one", "The cat sat.", "It was", "happy and glad."}),
      t0, out);
  ASSERT_EQ(out.replies.size(), 1u);
  const protocol::Reply r = reply_of(out);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.texts,
            (std::vector<std::string>{"short one", "The cat sat.\n\nIt was  happy and glad. "}));
  ASSERT_TRUE(r.scores.has_value());
  ASSERT_EQ(r.scores->size(), 2u);
  EXPECT_FLOAT_EQ((*r.scores)[1], (-1.0f - 1.5f - 2.0f) / 3);  // the pieces' mean
  // The pieces' tokens summed; cut by the length, as one piece was (eos and stop the others).
  const protocol::Usage joined{3 + 4 + 5, 20 + 30 + 40, protocol::FinishReason::kLength};
  EXPECT_EQ(r.usage, (std::vector<protocol::Usage>{{2, 10, protocol::FinishReason::kEos}, joined}));
  // The same text again: every piece from the cache, with its usage.
  out.clear();
  g.on_client(request("A", texts({long_text}, true)), t0, out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).texts.at(0), "The cat sat.\n\nIt was  happy and glad. ");
  EXPECT_EQ(reply_of(out).usage, std::vector<protocol::Usage>{joined});
  EXPECT_EQ(g.in_flight(), 0u);
}

TEST_F(GatewaySplitTest, HypothesisKJoinsEachPiecesKthOrItsLast) {
  config::PipelineConfig c;
  c.gateway.split_words = 2;
  Gateway& g = gateway(c);
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{1}, t0);
  protocol::Request request_of_two = texts({"teh cat. sat on"});
  request_of_two.params.num_beams = 2;
  request_of_two.params.num_return_sequences = 2;
  g.on_client(request("A", request_of_two), t0, out);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 1u);
  stage::Result result = result_for(out.sends[0].message, {"the cat.", "sat on"});
  result.items[0].alternatives = {"ten cat."};
  result.items[0].alternative_scores = {-3.0f};
  g.on_results(std::move(result), t0, out);
  ASSERT_EQ(out.replies.size(), 1u);
  const protocol::Reply r = reply_of(out);
  ASSERT_TRUE(r.sequences.has_value());
  ASSERT_EQ(r.sequences->at(0).size(), 2u);
  EXPECT_EQ(r.texts.at(0), "the cat. sat on");
  EXPECT_EQ(r.sequences->at(0)[0], (protocol::Sequence{"the cat. sat on", -0.75f}));
  EXPECT_EQ(r.sequences->at(0)[1], (protocol::Sequence{"ten cat. sat on", -2.0f}));
}

// A streamed text is split as any other (its text is the one without `stream`), each piece
// streamed: the gateway sends them in turn (GatewayTest,
// AStreamOfASplitTextSendsEachPieceInTurnAndAddsUpToTheJoinedText).
TEST_F(GatewaySplitTest, AStreamedTextIsSplitAsWithoutStream) {
  config::PipelineConfig c;
  c.gateway.split_words = 2;
  Gateway& g = gateway(c);
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{4}, t0);
  protocol::Request r = texts({"teh cat sat on"});
  r.stream = true;
  g.on_client(request("A", r), t0, out);
  g.dispatch(t0, out);
  std::vector<stage::TextItem> items;
  for (const auto& send : out.sends)
    for (const auto& i : work_of(send.message).items) items.push_back(i);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].text, "teh cat");
  EXPECT_EQ(items[1].text, "sat on");
  EXPECT_TRUE(items[0].stream && items[1].stream);
}

TEST_F(GatewaySplitTest, MorePiecesThanTheBatcherCanQueueAreAnsweredTooLongAtOnce) {
  config::PipelineConfig c;
  c.gateway.split_words = 1;
  c.batcher.max_queue_size = 3;
  Gateway& g = gateway(c);
  Outbox out;
  g.on_client(request("A", texts({"a b", "c d"})), t0, out);
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_of(out).error->code, protocol::ErrorCode::kTooLong);
  EXPECT_EQ(g.in_flight(), 0u);
  EXPECT_EQ(g.waiting(), 0u);
  out.clear();
  g.on_client(request("A", texts({"a b", "c"})), t0, out);  // 3 pieces fit
  EXPECT_TRUE(out.replies.empty());
  EXPECT_EQ(g.in_flight(), 1u);
}

}  // namespace
}  // namespace seqpipe::gateway
