// The gateway's streamed replies and the texts it splits into pieces, on an injected clock, no
// sockets (gateway_fixture.h): partials add up to the final text, pieces join into one.
#include <gtest/gtest.h>

#include "gateway_fixture.h"

namespace seqpipe::gateway {
namespace {

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

// A client library sends a request again with its id when no reply came in its retry_after (a
// slow stream under load): on the same connection that is the one in flight, computed and
// streamed once; another connection's request of that id is its own.
TEST_F(GatewayTest, ARequestSentAgainWhileItsIdIsInFlightOnItsConnectionIsAnsweredOnce) {
  Gateway& g = gateway();
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{8}, t0);
  protocol::Request r = texts({"teh speling"});
  r.stream = true;
  g.on_client(request("A", r), t0, out);
  g.on_client(request("A", r), t0 + milliseconds(5), out);  // the retry
  g.on_client(request("B", r), t0 + milliseconds(6), out);
  g.dispatch(t0 + milliseconds(6), out);
  ASSERT_EQ(out.sends.size(), 2u) << "A's and B's, not A's twice";
  EXPECT_TRUE(out.replies.empty());
  EXPECT_EQ(g.in_flight(), 2u);
  const stage::StageMessage a_work = out.sends[0].message;
  out.clear();
  g.on_results(stage::StageMessage(result_for(a_work, {"the spelling"})), t0, out);
  ASSERT_EQ(out.replies.size(), 2u);  // the whole text as a last partial, then the final reply
  EXPECT_EQ(out.replies[1].first, (Envelope{"A", ""}));
  EXPECT_EQ(reply_of(out, 1).texts.at(0), "the spelling");
  // Answered, the id is free again: the same request once more is a new one.
  out.clear();
  g.on_client(request("A", r), t0 + milliseconds(7), out);
  g.dispatch(t0 + milliseconds(7), out);
  EXPECT_EQ(out.sends.size(), 1u);
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
