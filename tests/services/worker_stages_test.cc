// The tokenizer, encoder and decoder stages driven directly (no sockets) against the engine
// itself (worker_stages_fixture.h).
#include <gtest/gtest.h>

#include "worker_stages_fixture.h"

namespace seqpipe {
namespace {

TEST_F(WorkerStages, TokenizerSendsIdsToTheBatcherAndTooLongTextsToTheGateway) {
  config_.batcher.ingress_endpoint = "ipc:///tmp/in.sock";
  config_.model.max_input_tokens = 8;
  tokenizer::TokenizerStage stage(*tokenizer_, tokenizer::tokenizer_options(config_), metrics_);
  worker::WorkerOutbox out;
  stage::TextItem expired = item(3, "hello");
  expired.deadline = Deadline::at_unix_us(Now::read().unix_us - 1);
  stage.handle(stage::Tokenize{{item(1, "teh speling"), item(2, "a b c d e f g h i j k l m n o p"),
                                expired}},
               out);
  ASSERT_EQ(out.pushes.size(), 2u);
  // too long: a failed result to the item's gateway
  const auto& [gw, failed] = out.pushes[0];
  EXPECT_EQ(gw, "ipc:///tmp/gw0.sock");
  EXPECT_EQ(stage::kind(failed), stage::MessageKind::kResult);
  EXPECT_EQ(as<stage::Result>(failed).items.at(0).error->code, protocol::ErrorCode::kTooLong);
  // the good one: ids to the batcher; the expired one is dropped
  const auto& [ingress, seq] = out.pushes[1];
  EXPECT_EQ(ingress, "ipc:///tmp/in.sock");
  ASSERT_EQ(as<stage::Sequence>(seq).items.size(), 1u);
  const auto want = (*tokenizer_)->encode("teh speling");
  EXPECT_EQ(as<stage::Sequence>(seq).items[0].ids, std::vector<int32_t>(want.begin(), want.end()));
  EXPECT_EQ(as<stage::Sequence>(seq).items[0].prompt_tokens, want.size());  // the reply's usage
  EXPECT_TRUE(as<stage::Sequence>(seq).items[0].text.empty());
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(stage::kind(out.sends[0].message), stage::MessageKind::kCredit);
  EXPECT_EQ(as<stage::Credit>(out.sends[0].message).credits, 1);
}

// Stop strings end decoding early: the tokenizer encodes each alone, and a greedy sequence whose
// output ends with those ids stops there, making fewer tokens.
TEST_F(WorkerStages, StopStringsEndAGreedySequenceAtTheirTokens) {
  tokenizer::TokenizerStage tokenizer(*tokenizer_, tokenizer::tokenizer_options(config_), metrics_);
  worker::WorkerOutbox tokenized;
  stage::TextItem text = item(1, "teh speling");
  text.params.stop = {"hello", "x y"};
  tokenizer.handle(stage::Tokenize{{text}}, tokenized);
  const stage::SequenceItem s = as<stage::Sequence>(tokenized.pushes.at(0).second).items.at(0);
  ASSERT_EQ(s.stop_ids.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    auto want = (*tokenizer_)->encode(text.params.stop[k]);
    want.pop_back();  // eos
    EXPECT_EQ(s.stop_ids[k], std::vector<int32_t>(want.begin(), want.end()));
  }

  auto run = [&](std::vector<std::vector<int32_t>> stop_ids) {
    decoder::DecoderStage decoder(*model_, decoder::decoder_options(config_), metrics_);
    stage::EncodedItem e = encoded(1, "teh speling", 1);
    e.params.max_new_tokens = e.params.min_new_tokens = 12;
    e.stop_ids = std::move(stop_ids);
    worker::WorkerOutbox out;
    decoder.handle(stage::Decode{{e}}, out);
    for (int steps = 0; decoder.has_pending_work() && steps < 100; ++steps) decoder.work(out);
    return as<stage::Decoded>(out.sends.back().message).items.at(0).ids;
  };
  const std::vector<int32_t> full = run({});
  ASSERT_EQ(full.size(), 13u);  // the start token and 12
  const std::vector<int32_t> stop = {full[5], full[6]};
  // Where the pair first ends in the generated ids (it may come earlier than at 5, 6).
  auto end = std::search(full.begin() + 1, full.end(), stop.begin(), stop.end()) + 2;
  const std::vector<int32_t> stopped = run({{999999}, stop});
  EXPECT_EQ(stopped, std::vector<int32_t>(full.begin(), end));
  EXPECT_LT(stopped.size(), full.size());
}

TEST_F(WorkerStages, TokenizerSendsEachSequenceToTheBatcherTheGatewayChoseAndAnswersThatGateway) {
  config_.batcher.ingress_endpoint = "ipc:///tmp/in.sock";
  tokenizer::TokenizerStage stage(*tokenizer_, tokenizer::tokenizer_options(config_), metrics_);
  worker::WorkerOutbox out;
  out.hub = 1;  // the second gateway it serves
  stage::TextItem to_b1 = item(1, "teh speling"), to_b2 = item(2, "hello", 0),
                  also_b1 = item(3, "world");
  to_b1.batcher = also_b1.batcher = "ipc:///tmp/b1-in.sock";
  to_b2.batcher = "ipc:///tmp/b2-in.sock";
  stage.handle(stage::Tokenize{{to_b1, to_b2, also_b1, item(4, "none named")}}, out);
  std::map<std::string, std::vector<uint64_t>> sent;
  for (const auto& [endpoint, m] : out.pushes) {
    EXPECT_EQ(stage::kind(m), stage::MessageKind::kSequence);
    for (const auto& i : as<stage::Sequence>(m).items) sent[endpoint].push_back(i.request);
  }
  EXPECT_EQ(sent, (std::map<std::string, std::vector<uint64_t>>{{"ipc:///tmp/b1-in.sock", {1, 3}},
                                                                {"ipc:///tmp/b2-in.sock", {2}},
                                                                {"ipc:///tmp/in.sock", {4}}}));
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0], (worker::WorkerOutbox::Send{1, "", stage::Credit{1}}));
}

TEST_F(WorkerStages, EncoderRowsEqualTheEnginesBitForBit) {
  encoder::EncoderStage stage(*model_, encoder::encoder_options(config_), metrics_);
  worker::WorkerOutbox out;
  std::vector<stage::SequenceItem> items;
  for (const char* t : {"teh speling", "hello world again"}) items.push_back(sequence(1, t));
  stage.handle(stage::Encode{items}, out);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(stage::kind(out.sends[0].message), stage::MessageKind::kEncoded);
  const auto& encoded = as<stage::Encoded>(out.sends[0].message);
  EXPECT_EQ(encoded.credits, 1);
  ASSERT_EQ(encoded.items.size(), 2u);
  engine::Encoder reference(*model_);
  const auto want = reference.encode(
      {(*tokenizer_)->encode("teh speling"), (*tokenizer_)->encode("hello world again")});
  for (size_t i = 0; i < 2; ++i) {
    const stage::EncoderRows& rows = encoded.items[i].hidden;
    EXPECT_EQ(rows.rows, want.length(i));
    const auto bytes = rows.values.bytes();
    ASSERT_EQ(bytes.size(), static_cast<size_t>(want.length(i) * want.hidden.dim(1)) * 4);
    EXPECT_EQ(std::memcmp(bytes.data(), want.sequence(i).data(), bytes.size()), 0);
  }
}

TEST_F(WorkerStages, DecoderAnswersAFrameOfTheWrongSizeAndKeepsServing) {
  decoder::DecoderStage stage(*model_, decoder::decoder_options(config_), metrics_);
  stage::EncodedItem good = encoded(2, "teh speling");
  stage::EncodedItem short_frame = encoded(1, "teh speling");
  // The frame lost its last float: it no longer holds the header's rows of d_model floats.
  const auto bytes = short_frame.hidden.values.bytes();
  short_frame.hidden.values = {short_frame.hidden.values.owner(), bytes.first(bytes.size() - 4)};
  stage::EncodedItem extra_row = encoded(3, "teh speling");
  extra_row.hidden.rows += 1;  // the header claims a row the frame does not hold
  worker::WorkerOutbox out;
  stage.handle(stage::Decode{{short_frame, good, extra_row}}, out);
  ASSERT_EQ(out.pushes.size(), 2u);  // one failed result each, to its gateway
  for (const auto& [gateway, m] : out.pushes) {
    const auto& result = as<stage::Result>(m).items.at(0);
    EXPECT_EQ(result.error->code, protocol::ErrorCode::kInternal);
    EXPECT_NE(result.error->message.find("do not match the model"), std::string::npos);
  }
  EXPECT_NE(as<stage::Result>(out.pushes[0].second).items[0].error->message.find("a frame of"),
            std::string::npos);
  // Their slots go back at once; the good item runs to its end as the engine decodes it.
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(as<stage::Decoded>(out.sends[0].message).credits, 2);
  EXPECT_EQ(stage.running(), 1);
  for (int steps = 0; stage.has_pending_work() && steps < 100; ++steps) stage.work(out);
  EXPECT_EQ(as<stage::Decoded>(out.sends.back().message).items.at(0).ids,
            reference("teh speling", 1));
}

TEST_F(WorkerStages, DecoderMatchesTheEngineWithSequencesJoiningMidway) {
  decoder::DecoderStage stage(*model_, decoder::decoder_options(config_), metrics_);
  EXPECT_EQ(stage.capacity(), 8);
  worker::WorkerOutbox out;
  stage.handle(stage::Decode{{encoded(1, "teh speling", 4)}}, out);
  EXPECT_EQ(stage.free_slots(), 4);
  stage.work(out);
  stage.work(out);  // the beam search is two steps in when the greedy one joins
  stage.handle(stage::Decode{{encoded(2, "hello world")}}, out);
  std::map<uint64_t, std::vector<int32_t>> got;
  int credits = 0;
  for (int steps = 0; stage.has_pending_work() && steps < 100; ++steps) stage.work(out);
  for (const auto& [hub, peer, m] : out.sends) {
    EXPECT_EQ(stage::kind(m), stage::MessageKind::kDecoded);
    credits += as<stage::Decoded>(m).credits;
    for (const auto& i : as<stage::Decoded>(m).items) got[i.request] = i.ids;
  }
  EXPECT_EQ(credits, 5);  // 4 beams + 1
  EXPECT_EQ(stage.free_slots(), 8);
  const auto want1 = reference("teh speling", 4), want2 = reference("hello world", 1);
  EXPECT_EQ(got[1], std::vector<int32_t>(want1.begin(), want1.end()));
  EXPECT_EQ(got[2], std::vector<int32_t>(want2.begin(), want2.end()));
}

TEST_F(WorkerStages, DecoderStopsACancelledSequenceAndReturnsItsSlotsWhileOthersGoOn) {
  decoder::DecoderStage stage(*model_, decoder::decoder_options(config_), metrics_);
  worker::WorkerOutbox out;
  stage::EncodedItem doomed = encoded(1, "teh speling", 4);
  doomed.params.min_new_tokens = 12;  // would run every step
  stage.handle(stage::Decode{{doomed, encoded(2, "hello world")}}, out);
  stage.work(out);
  ASSERT_EQ(stage.running(), 2);
  EXPECT_EQ(stage.free_slots(), 3);
  out.sends.clear();
  // A cancel for another gateway's request 1 and for an unknown request: nothing stops.
  stage::RequestRef other = ref(1);
  other.gateway = "ipc:///tmp/elsewhere.sock";
  stage.cancel(stage::Cancel{{other, ref(7)}}, out);
  EXPECT_EQ(stage.running(), 2);
  EXPECT_TRUE(out.sends.empty());
  stage.cancel(stage::Cancel{{ref(1)}}, out);
  EXPECT_EQ(stage.running(), 1);
  EXPECT_EQ(stage.free_slots(), 7);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].message,
            stage::StageMessage(stage::Decoded{4, {}}));  // its 4 slots, no result
  out.sends.clear();
  for (int steps = 0; stage.has_pending_work() && steps < 100; ++steps) stage.work(out);
  ASSERT_EQ(out.sends.size(), 1u);
  const auto& decoded = as<stage::Decoded>(out.sends[0].message);
  ASSERT_EQ(decoded.items.size(), 1u);
  EXPECT_EQ(decoded.items[0].request, 2u);
  EXPECT_EQ(decoded.credits, 1);
  const auto want = reference("hello world", 1);
  EXPECT_EQ(decoded.items[0].ids, std::vector<int32_t>(want.begin(), want.end()));
  EXPECT_EQ(stage.free_slots(), 8);
  EXPECT_TRUE(out.pushes.empty());
}

TEST_F(WorkerStages, DecoderServingTwoBatchersAnswersEachWithItsOwnResultsSlotsAndCancels) {
  decoder::DecoderStage stage(*model_, decoder::decoder_options(config_), metrics_);
  worker::WorkerOutbox out;
  out.hub = 0;
  stage.handle(stage::Decode{{encoded(1, "teh speling", 2)}}, out);
  out.hub = 1;  // the other batcher sends the same request id of the same gateway, and another
  stage.handle(stage::Decode{{encoded(1, "teh speling"), encoded(2, "hello world")}}, out);
  EXPECT_EQ(stage.held(0), 2);
  EXPECT_EQ(stage.held(1), 2);
  // Batcher 1 cancels request 1: only its own sequence stops, the credit goes back to it.
  stage.cancel(stage::Cancel{{ref(1)}}, out);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0], (worker::WorkerOutbox::Send{1, "", stage::Decoded{1, {}}}));
  EXPECT_EQ(stage.held(0), 2);
  EXPECT_EQ(stage.held(1), 1);
  out.sends.clear();
  for (int steps = 0; stage.has_pending_work() && steps < 100; ++steps) stage.work(out);
  std::map<size_t, std::vector<uint64_t>> results;
  std::map<size_t, int> credits;
  for (const auto& [hub, peer, m] : out.sends) {
    EXPECT_EQ(stage::kind(m), stage::MessageKind::kDecoded);
    credits[hub] += as<stage::Decoded>(m).credits;
    for (const auto& i : as<stage::Decoded>(m).items) results[hub].push_back(i.request);
  }
  EXPECT_EQ(results, (std::map<size_t, std::vector<uint64_t>>{{0, {1}}, {1, {2}}}));
  EXPECT_EQ(credits, (std::map<size_t, int>{{0, 2}, {1, 1}}));
  EXPECT_EQ(stage.held(0) + stage.held(1), 0);
  EXPECT_EQ(stage.free_slots(), 8);
}

TEST_F(WorkerStages, TokenizerDropsExpiredItemsButReturnsTheCredit) {
  config_.batcher.ingress_endpoint = "ipc:///tmp/in.sock";
  tokenizer::TokenizerStage stage(*tokenizer_, tokenizer::tokenizer_options(config_), metrics_);
  worker::WorkerOutbox out;
  stage::TextItem expired = item(1, "hello");
  expired.deadline = Deadline::at_unix_us(Now::read().unix_us - 1);
  stage.handle(stage::Tokenize{{expired}}, out);
  EXPECT_TRUE(out.pushes.empty());
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].message, stage::StageMessage(stage::Credit{1}));
}

TEST_F(WorkerStages, EncoderFailsItemsWithoutIdsAndReturnsTheCreditWhenTheEngineThrows) {
  encoder::EncoderStage stage(*model_, encoder::encoder_options(config_), metrics_);
  worker::WorkerOutbox out;
  stage::SequenceItem good = sequence(2, "hello world");
  const auto ids = (*tokenizer_)->encode("hello world");
  stage.handle(stage::Encode{{sequence(1), good}}, out);  // item 1 has no ids
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items.at(0).request, 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items[0].error->code,
            protocol::ErrorCode::kInternal);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(as<stage::Encoded>(out.sends[0].message).credits, 1);
  ASSERT_EQ(as<stage::Encoded>(out.sends[0].message).items.size(), 1u);
  EXPECT_EQ(as<stage::Encoded>(out.sends[0].message).items[0].hidden.rows,
            static_cast<int64_t>(ids.size()));

  out = {};
  stage::SequenceItem bad = good;
  bad.ids[0] = 100000;  // outside the vocabulary: the engine throws, the whole batch fails
  stage.handle(stage::Encode{{bad, good}}, out);
  ASSERT_EQ(out.pushes.size(), 2u);
  for (const auto& [gw, m] : out.pushes)
    EXPECT_EQ(as<stage::Result>(m).items.at(0).error->code, protocol::ErrorCode::kInternal);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].message, stage::StageMessage(stage::Encoded{1, {}}));
}

TEST_F(WorkerStages, DecoderGreedyAndBeamTogetherMatchTheEngineScoresIncluded) {
  decoder::DecoderStage stage(*model_, decoder::decoder_options(config_), metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Decode{{encoded(1, "hello world"), encoded(2, "teh speling", 4)}}, out);
  EXPECT_TRUE(out.empty());  // both admitted: no credit back yet
  EXPECT_EQ(stage.free_slots(), 3);
  EXPECT_EQ(stage.free_capacity(), 3);
  for (int steps = 0; stage.has_pending_work() && steps < 100; ++steps) stage.work(out);
  std::map<uint64_t, stage::DecodedItem> got;
  int credits = 0;
  for (const auto& [hub, peer, m] : out.sends) {
    credits += as<stage::Decoded>(m).credits;
    for (const auto& i : as<stage::Decoded>(m).items) got[i.request] = i;
  }
  EXPECT_EQ(credits, 5);
  ASSERT_EQ(got.size(), 2u);
  for (auto [request, text, beams] :
       {std::tuple<uint64_t, const char*, int>{1, "hello world", 1},
        std::tuple<uint64_t, const char*, int>{2, "teh speling", 4}}) {
    engine::DecodingOptions o;
    o.max_new_tokens = 12;
    o.num_beams = beams;
    const auto want = engine::generate(*model_, {(*tokenizer_)->encode(text)}, o).at(0);
    EXPECT_EQ(got[request].ids, std::vector<int32_t>(want.ids.begin(), want.ids.end())) << text;
    if (beams > 1) {
      EXPECT_FLOAT_EQ(got[request].score, want.score);
    }
  }
}

TEST_F(WorkerStages, DecoderCancelsAnExpiredRunningSequenceAndReturnsExactlyItsSlots) {
  ManualTime time(Now::read());  // the stage's clock moves only when the test says so
  decoder::DecoderStage stage(*model_, decoder::decoder_options(config_), metrics_, time);
  worker::WorkerOutbox out;
  stage::EncodedItem running = encoded(1, "teh speling", 2);
  running.params.min_new_tokens = 12;  // cannot finish before its deadline
  running.deadline = Deadline::after(time.now(), std::chrono::milliseconds(300));
  stage.handle(stage::Decode{{running}}, out);
  ASSERT_EQ(stage.running(), 1);
  stage.work(out);
  EXPECT_TRUE(out.sends.empty());
  EXPECT_EQ(stage.running(), 1);
  time.advance(std::chrono::milliseconds(300));
  stage.work(out);
  EXPECT_EQ(stage.running(), 0);
  EXPECT_FALSE(stage.has_pending_work());
  EXPECT_EQ(stage.free_slots(), 8);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].message,
            stage::StageMessage(stage::Decoded{2, {}}));  // slots back, no result
  EXPECT_TRUE(out.pushes.empty());  // the gateway answers deadline_exceeded itself
}

}  // namespace
}  // namespace seqpipe
