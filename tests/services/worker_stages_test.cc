// The four worker stages driven directly (no sockets) against the engine itself, on a random
// tiny checkpoint with a SentencePiece model made by seqpipe-mkmodel.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "decoder/decoder_stage.h"
#include "encoder/encoder_stage.h"
#include "postprocessor/postprocessor_stage.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/engine/model.h"
#include "tokenizer/tokenizer_stage.h"

namespace seqpipe {
namespace {

class WorkerStages : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("seqpipe-stages-" + std::to_string(::getpid())));
    const std::string cmd = std::string(SEQPIPE_MKMODEL) +
                            " --preset tiny --gated --untied --spiece --seed 3 --out " + *dir_ +
                            " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    model_ = new std::shared_ptr<const engine::T5Model>(
        engine::T5Model::load(*dir_, {.threads = 1, .device = engine::Device::kCpu}));
    tokenizer_ = new std::shared_ptr<const engine::Tokenizer>(
        std::make_shared<engine::Tokenizer>(*dir_ + "/spiece.model"));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete model_;
    delete tokenizer_;
    delete dir_;
  }
  WorkerStages() : registry_(metrics::make_registry()), metrics_(*registry_, "test") {
    config_.model.max_input_tokens = 32;
    config_.decoder.num_slots = 8;
    config_.decoder.max_new_tokens = 12;
  }
  static stage::WorkHeader header(uint64_t request, uint32_t index = 0) {
    stage::WorkHeader w;
    w.request = request;
    w.index = index;
    w.gateway = "ipc:///tmp/gw" + std::to_string(request % 2) + ".sock";
    w.deadline = Deadline::after(Now::read(), std::chrono::seconds(60));
    w.params.max_new_tokens = 12;
    return w;
  }
  static stage::TextItem item(uint64_t request, std::string text = "", uint32_t index = 0) {
    auto w = stage::next_hop<stage::TextItem>(header(request, index));
    w.text = std::move(text);
    return w;
  }
  // The text's ids (none without a text).
  static stage::SequenceItem sequence(uint64_t request, const std::string& text = "") {
    auto w = stage::next_hop<stage::SequenceItem>(header(request));
    if (text.empty()) return w;
    const auto ids = (*tokenizer_)->encode(text);
    w.ids.assign(ids.begin(), ids.end());
    return w;
  }
  static stage::DecodedItem decoded(uint64_t request) {
    return stage::next_hop<stage::DecodedItem>(header(request));
  }
  static stage::RequestRef ref(uint64_t request) {
    const stage::WorkHeader h = header(request);
    return {h.request, h.gateway, h.deadline};
  }
  stage::EncodedItem encoded(uint64_t request, const std::string& text, int beams = 1) {
    auto w = stage::next_hop<stage::EncodedItem>(header(request));
    w.params.num_beams = beams;
    const auto ids = (*tokenizer_)->encode(text);
    engine::Encoder encoder(*model_);
    const auto out = encoder.encode({ids});
    w.hidden.rows = out.length(0);
    w.hidden.values = stage::TensorFrame::floats(static_cast<size_t>(out.hidden.numel()),
                                                 [&](float* rows) { out.copy_sequence(0, rows); });
    return w;
  }
  template <class M>
  static const M& as(const stage::StageMessage& m) {
    return std::get<M>(m);
  }
  static std::vector<int> reference(const std::string& text, int beams) {
    engine::DecodingOptions o;
    o.max_new_tokens = 12;
    o.num_beams = beams;
    return engine::generate(*model_, {(*tokenizer_)->encode(text)}, o)[0].ids;
  }

  static std::string* dir_;
  static std::shared_ptr<const engine::T5Model>* model_;
  static std::shared_ptr<const engine::Tokenizer>* tokenizer_;
  config::PipelineConfig config_;
  std::shared_ptr<prometheus::Registry> registry_;
  metrics::StageMetrics metrics_;
};
std::string* WorkerStages::dir_ = nullptr;
std::shared_ptr<const engine::T5Model>* WorkerStages::model_ = nullptr;
std::shared_ptr<const engine::Tokenizer>* WorkerStages::tokenizer_ = nullptr;

TEST_F(WorkerStages, TokenizerSendsIdsToTheBatcherAndTooLongTextsToTheGateway) {
  config_.batcher.ingress_endpoint = "ipc:///tmp/in.sock";
  config_.model.max_input_tokens = 8;
  tokenizer::TokenizerStage stage(*tokenizer_, config_, metrics_);
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
  tokenizer::TokenizerStage tokenizer(*tokenizer_, config_, metrics_);
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
    decoder::DecoderStage decoder(*model_, config_, metrics_);
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
  tokenizer::TokenizerStage stage(*tokenizer_, config_, metrics_);
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
  encoder::EncoderStage stage(*model_, config_, metrics_);
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
  decoder::DecoderStage stage(*model_, config_, metrics_);
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
  decoder::DecoderStage stage(*model_, config_, metrics_);
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
  decoder::DecoderStage stage(*model_, config_, metrics_);
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
  decoder::DecoderStage stage(*model_, config_, metrics_);
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
  tokenizer::TokenizerStage stage(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox out;
  stage::TextItem expired = item(1, "hello");
  expired.deadline = Deadline::at_unix_us(Now::read().unix_us - 1);
  stage.handle(stage::Tokenize{{expired}}, out);
  EXPECT_TRUE(out.pushes.empty());
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].message, stage::StageMessage(stage::Credit{1}));
}

TEST_F(WorkerStages, EncoderFailsItemsWithoutIdsAndReturnsTheCreditWhenTheEngineThrows) {
  encoder::EncoderStage stage(*model_, config_, metrics_);
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
  decoder::DecoderStage stage(*model_, config_, metrics_);
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
  decoder::DecoderStage stage(*model_, config_, metrics_, time);
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

TEST_F(WorkerStages, PostprocessorTextEqualsTokenizerDecodeAndExpiredItemsAreCredited) {
  postprocessor::PostprocessorStage stage(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox out;
  const std::vector<std::string> texts = {"hello world", "teh speling", "the cat sat on the mat"};
  std::vector<stage::DecodedItem> items;
  for (uint64_t r = 0; r < texts.size(); ++r) {
    stage::DecodedItem w = decoded(r + 1);
    w.ids = {0};  // the decoder start token, as generate returns it
    for (int id : (*tokenizer_)->encode(texts[r])) w.ids.push_back(id);
    items.push_back(w);
  }
  items[2].deadline = Deadline::at_unix_us(Now::read().unix_us - 1);
  std::map<uint64_t, std::string> want;
  for (const auto& w : items)
    want[w.request] = (*tokenizer_)->decode(std::vector<int>(w.ids.begin(), w.ids.end()));
  stage.handle(stage::Postprocess{items}, out);
  std::map<uint64_t, std::string> got;
  for (const auto& [gw, m] : out.pushes) {
    for (const auto& i : as<stage::Result>(m).items) got[i.request] = i.text;
  }
  ASSERT_EQ(got.size(), 2u);  // the expired one is dropped
  EXPECT_EQ(got[1], want[1]);
  EXPECT_EQ(got[2], want[2]);
  EXPECT_FALSE(got[1].empty());
  EXPECT_NE(got[1], got[2]);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].message, stage::StageMessage(stage::Credit{3}));  // every item's credit
}

TEST_F(WorkerStages, PostprocessorResultsCarryTheUsageAndACutTextEndsByStop) {
  postprocessor::PostprocessorStage stage(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox out;
  std::vector<stage::DecodedItem> items;
  for (uint64_t r = 1; r <= 2; ++r) {
    stage::DecodedItem w = decoded(r);
    w.ids = {0};
    for (int id : (*tokenizer_)->encode("hello world")) w.ids.push_back(id);
    w.prompt_tokens = 7;
    w.finish_reason = protocol::FinishReason::kEos;
    items.push_back(w);
  }
  items[1].params.stop = {"world"};  // the model spelled it within the text: cut, so stop
  const uint32_t generated = static_cast<uint32_t>(items[0].ids.size() - 1);
  stage.handle(stage::Postprocess{items}, out);
  std::map<uint64_t, stage::ResultItem> got;
  for (const auto& [gw, m] : out.pushes) {
    for (const auto& i : as<stage::Result>(m).items) got[i.request] = i;
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].prompt_tokens, 7u);
  EXPECT_EQ(got[1].completion_tokens, generated);  // the start token is not generated
  EXPECT_EQ(got[1].finish_reason, protocol::FinishReason::kEos);
  EXPECT_EQ(got[2].text, "hello ");
  EXPECT_EQ(got[2].completion_tokens, generated);
  EXPECT_EQ(got[2].finish_reason, protocol::FinishReason::kStop);
}

TEST(CutBeforeStop, CutsBeforeTheEarliestStopSequence) {
  EXPECT_EQ(postprocessor::cut_before_stop("one. two! three", {"!", "."}), "one");
  EXPECT_EQ(postprocessor::cut_before_stop("one two", {"!"}), "one two");
  EXPECT_EQ(postprocessor::cut_before_stop("stop here", {"stop"}), "");
  EXPECT_EQ(postprocessor::cut_before_stop("caf\xc3\xa9 au lait", {"\xc3\xa9"}), "caf");
}

TEST(StablePrefix, HoldsBackTheLastWordAndWhatMayBecomeAStopSequence) {
  using postprocessor::stable_prefix;
  EXPECT_EQ(stable_prefix("one two thr", {}), "one two ");  // "thr" may still grow
  EXPECT_EQ(stable_prefix("one", {}), "");
  EXPECT_EQ(stable_prefix("one two ", {}), "one two ");
  // A UTF-8 sequence cut between tokens is never sent: it is part of the last word.
  EXPECT_EQ(stable_prefix("caf\xc3", {}), "");
  EXPECT_EQ(stable_prefix("au caf\xc3", {}), "au ");
  EXPECT_EQ(stable_prefix("one two. three four", {"."}), "one ");  // cut, then the last word
  // A suffix that may still become a stop sequence waits, however many words it spans.
  EXPECT_EQ(stable_prefix("one two the end is", {"the end is near"}), "one two ");
  EXPECT_EQ(stable_prefix("one two the end is far", {"the end is near"}), "one two the end is ");
  EXPECT_EQ(stable_prefix("one two END", {"ENDING"}), "one two ");
  // Each partial is a prefix of the next and of the final text, token by token.
  const std::vector<std::string> stop = {"lait"};
  const std::string final_text(postprocessor::cut_before_stop("un caf\xc3\xa9 au lait", stop));
  const std::string full = "un caf\xc3\xa9 au lait chaud";
  std::string previous;
  for (size_t n = 0; n <= full.size(); ++n) {
    const std::string now(stable_prefix(full.substr(0, n), stop));
    EXPECT_TRUE(now.starts_with(previous)) << n;
    EXPECT_TRUE(final_text.starts_with(now)) << n;
    previous = now;
  }
}

// A streamed sequence's ids so far go out after every step as partial items (no credits), the
// final one as usual; the postprocessor turns partials into stable prefixes of the final text.
TEST_F(WorkerStages, AStreamedSequenceSendsPartialsThatArePrefixesOfItsText) {
  decoder::DecoderStage decoder(*model_, config_, metrics_);
  worker::WorkerOutbox decoded_out;
  stage::EncodedItem item = encoded(1, "teh speling", 1);
  item.params.max_new_tokens = item.params.min_new_tokens = 12;
  item.stream = true;
  decoder.handle(stage::Decode{{item}}, decoded_out);
  for (int steps = 0; decoder.has_pending_work() && steps < 100; ++steps) decoder.work(decoded_out);
  std::vector<stage::DecodedItem> partials;
  std::optional<stage::DecodedItem> final_item;
  int credits = 0;
  for (const auto& send : decoded_out.sends) {
    const auto& d = as<stage::Decoded>(send.message);
    credits += d.credits;
    for (const auto& i : d.items) {
      if (i.partial) {
        partials.push_back(i);
      } else {
        final_item = i;
      }
    }
  }
  ASSERT_TRUE(final_item);
  EXPECT_EQ(credits, 1);            // the final's slot only
  ASSERT_EQ(partials.size(), 11u);  // after every step but the last
  for (size_t k = 0; k < partials.size(); ++k) {
    ASSERT_EQ(partials[k].ids.size(), k + 2);  // the start token and k + 1 tokens
    EXPECT_TRUE(
        std::equal(partials[k].ids.begin(), partials[k].ids.end(), final_item->ids.begin()));
    EXPECT_TRUE(partials[k].stream);
  }
  postprocessor::PostprocessorStage post(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox out;
  stage::Postprocess work;
  work.items = partials;
  work.items.push_back(*final_item);
  post.handle(std::move(work), out);
  std::vector<stage::ResultItem> results;
  for (const auto& [gateway, m] : out.pushes) {
    for (const auto& r : as<stage::Result>(m).items) results.push_back(r);
  }
  ASSERT_EQ(results.size(), partials.size() + 1);
  EXPECT_FALSE(results.back().partial);
  const std::string final_text = results.back().text;
  EXPECT_EQ(
      final_text,
      (*tokenizer_)->decode(std::vector<int>(final_item->ids.begin(), final_item->ids.end())));
  std::string previous;
  for (size_t k = 0; k < partials.size(); ++k) {
    EXPECT_TRUE(results[k].partial);
    EXPECT_TRUE(results[k].text.starts_with(previous));
    EXPECT_TRUE(final_text.starts_with(results[k].text));
    previous = results[k].text;
  }
}

// The decoder returns num_return_sequences hypotheses with their scores; the postprocessor
// turns them into texts, each cut before a stop sequence.
TEST_F(WorkerStages, NumReturnSequencesAndStopReachTheResult) {
  decoder::DecoderStage decoder(*model_, config_, metrics_);
  worker::WorkerOutbox decoded_out;
  stage::EncodedItem item = encoded(1, "teh speling", 4);
  item.params.num_return_sequences = 3;
  decoder.handle(stage::Decode{{item}}, decoded_out);
  for (int steps = 0; decoder.has_pending_work() && steps < 100; ++steps) decoder.work(decoded_out);
  ASSERT_EQ(decoded_out.sends.size(), 1u);
  stage::DecodedItem d = as<stage::Decoded>(decoded_out.sends[0].message).items.at(0);
  engine::DecodingOptions o;
  o.max_new_tokens = 12;
  o.num_beams = 4;
  o.num_return_sequences = 3;
  const auto want = engine::generate(*model_, {(*tokenizer_)->encode("teh speling")}, o).at(0);
  ASSERT_EQ(d.alternatives.size(), 2u);
  EXPECT_EQ(d.alternative_scores, want.alternative_scores);
  const std::string first_alt =
      (*tokenizer_)->decode(std::vector<int>(d.alternatives[0].begin(), d.alternatives[0].end()));
  ASSERT_GE(first_alt.size(), 2u);
  d.params.stop = {first_alt.substr(1, 1)};  // a character of the first alternative
  postprocessor::PostprocessorStage post(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox out;
  post.handle(stage::Postprocess{{d}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  const stage::ResultItem& r = as<stage::Result>(out.pushes[0].second).items.at(0);
  ASSERT_EQ(r.alternatives.size(), 2u);
  EXPECT_EQ(r.alternative_scores, want.alternative_scores);
  EXPECT_EQ(r.alternatives[0], postprocessor::cut_before_stop(first_alt, d.params.stop));
  EXPECT_LT(r.alternatives[0].size(), first_alt.size());
  EXPECT_EQ(r.text.find(d.params.stop[0]), std::string::npos);
  EXPECT_EQ(r.score, want.score);
}

TEST_F(WorkerStages, WithKnownWordsTheTextTravelsAndKnownInputWordsAreKept) {
  const std::string words = testing::TempDir() + "stage_known_words.txt";
  std::ofstream(words) << "hello\nworld\n";
  config_.postprocessor.known_words = words;
  // The tokenizer keeps the input text for the postprocessor's guard.
  tokenizer::TokenizerStage tokenizer(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox tokenized;
  tokenizer.handle(stage::Tokenize{{item(1, "hello wrld")}}, tokenized);
  ASSERT_EQ(tokenized.pushes.size(), 1u);
  stage::SequenceItem s = as<stage::Sequence>(tokenized.pushes[0].second).items.at(0);
  EXPECT_EQ(s.text, "hello wrld");
  // The text rides along to the postprocessor. The "model" says "help world": the known input
  // word "hello" comes back, "world" stays.
  std::string text = std::move(s.text);
  auto w = stage::next_hop<stage::DecodedItem>(std::move(s));
  w.text = std::move(text);
  w.ids = {0};
  for (int id : (*tokenizer_)->encode("help world")) w.ids.push_back(id);
  postprocessor::PostprocessorStage stage(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{w}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items.at(0).text, "hello world");
  // A list that cannot be read fails at start-up, naming the key and the file.
  config_.postprocessor.known_words = words + ":/nonexistent/words";
  EXPECT_THROW(postprocessor::PostprocessorStage(*tokenizer_, config_, metrics_),
               std::runtime_error);
  std::remove(words.c_str());
}

TEST_F(WorkerStages, TheHypothesesScoresDecideWhetherAKnownWordChanges) {
  const std::string words = testing::TempDir() + "stage_known_words3.txt";
  std::ofstream(words) << "he\nis\ntaller\nthen\nthan\nme\n";
  config_.postprocessor.known_words = words;
  config_.postprocessor.known_word_margin = 20;
  // The best hypothesis ("than") and the next one, which keeps "then", with their scores.
  auto decoded = [&](float best, float keeping) {
    stage::DecodedItem w;
    w.text = "he is taller then me";
    auto ids = [&](const std::string& t) {
      std::vector<int32_t> out = {0};
      for (int id : (*tokenizer_)->encode(t)) out.push_back(id);
      return out;
    };
    w.ids = ids("he is taller than me");
    w.score = best;
    w.alternatives = {ids("he is taller then me")};
    w.alternative_scores = {keeping};
    return w;
  };
  postprocessor::PostprocessorStage stage(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{decoded(-0.1f, -0.5f), decoded(-0.1f, -0.2f)}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  const auto& results = as<stage::Result>(out.pushes[0].second).items;
  ASSERT_EQ(results.size(), 2u);
  // 0.4 above the hypothesis keeping "then": over the margin of 0.20; 0.1: under it.
  EXPECT_EQ(results[0].text, "he is taller than me");
  EXPECT_EQ(results[1].text, "he is taller then me");
  std::remove(words.c_str());
}

TEST_F(WorkerStages, WithAspellAloneTheTextTravelsToThePostprocessor) {
  config_.postprocessor.aspell_dictionary = "/usr/lib/aspell/en_US.multi";
  tokenizer::TokenizerStage tokenizer(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox tokenized;
  tokenizer.handle(stage::Tokenize{{item(1, "helo wrld")}}, tokenized);
  ASSERT_EQ(tokenized.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Sequence>(tokenized.pushes[0].second).items.at(0).text, "helo wrld");
}

TEST_F(WorkerStages, WithLowerCaseWordsTheModelSeesPlainWordsAndTheTextIsPutBack) {
  config_.model.lower_case_words = 1;
  tokenizer::TokenizerStage tokenizer(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox tokenized;
  tokenizer.handle(stage::Tokenize{{item(1, "HELO WRLD, AT 5pm 😀")}}, tokenized);
  ASSERT_EQ(tokenized.pushes.size(), 1u);
  stage::SequenceItem s = as<stage::Sequence>(tokenized.pushes[0].second).items.at(0);
  const auto want = (*tokenizer_)->encode("helo wrld at");
  EXPECT_EQ(s.ids, std::vector<int32_t>(want.begin(), want.end()));
  EXPECT_EQ(s.text, "HELO WRLD, AT 5pm 😀");  // forwarded for the postprocessor
  std::string text = std::move(s.text);
  auto w = stage::next_hop<stage::DecodedItem>(std::move(s));
  w.text = std::move(text);
  // The "model" says "hello world at": each word takes its input's case (a text all in
  // capitals: its style, not acronyms), the rest is kept.
  w.ids = {0};
  for (int id : (*tokenizer_)->encode("hello world at")) w.ids.push_back(id);
  postprocessor::PostprocessorStage stage(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{w}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items.at(0).text, "HELLO WORLD, AT 5pm 😀");
}

TEST_F(WorkerStages, WithLowerCaseWordsTheUsersWordsAreKeptWhateverTheModelMakesOfThem) {
  config_.model.lower_case_words = 1;
  config_.postprocessor.user_words =
      std::string(SEQPIPE_SOURCE_DIR) + "/tests/e2e/speller/user_words.txt";
  tokenizer::TokenizerStage tokenizer(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox tokenized;
  tokenizer.handle(stage::Tokenize{{item(1, "restart Nginx, Kowalski")}}, tokenized);
  ASSERT_EQ(tokenized.pushes.size(), 1u);
  stage::SequenceItem s = as<stage::Sequence>(tokenized.pushes[0].second).items.at(0);
  std::string text = std::move(s.text);
  auto w = stage::next_hop<stage::DecodedItem>(std::move(s));
  w.text = std::move(text);
  w.ids = {0};
  for (int id : (*tokenizer_)->encode("restore ngnex kawasaki")) w.ids.push_back(id);
  postprocessor::PostprocessorStage stage(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{w}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  EXPECT_EQ(as<stage::Result>(out.pushes[0].second).items.at(0).text, "restore Nginx, Kowalski");
}

TEST_F(WorkerStages, WithLowerCaseWordsALongTextGivesTheModelTheWordsThatFit) {
  config_.model.lower_case_words = 1;
  tokenizer::TokenizerStage tokenizer(*tokenizer_, config_, metrics_);
  std::string text = "Teh";
  for (int i = 0; i < 100; ++i) text += " speling, 42";
  worker::WorkerOutbox tokenized;
  tokenizer.handle(stage::Tokenize{{item(1, text)}}, tokenized);
  ASSERT_EQ(tokenized.pushes.size(), 1u);  // no too_long: a sequence for the batcher
  stage::SequenceItem s = as<stage::Sequence>(tokenized.pushes[0].second).items.at(0);
  EXPECT_EQ(s.text, text);
  ASSERT_LE(s.ids.size(), static_cast<size_t>(config_.model.max_input_tokens));
  // The longest prefix of the words that fits.
  std::string prefix = "teh", longer;
  while (true) {
    longer = prefix + " speling";
    if (static_cast<int>((*tokenizer_)->encode(longer).size()) > config_.model.max_input_tokens)
      break;
    prefix = longer;
  }
  const auto want = (*tokenizer_)->encode(prefix);
  EXPECT_EQ(s.ids, std::vector<int32_t>(want.begin(), want.end()));
  auto w = stage::next_hop<stage::DecodedItem>(std::move(s));
  w.text = text;
  // The "model" corrects what it saw; the words it did not see stay as they are.
  w.ids = {0};
  std::string corrected = prefix;
  for (size_t at; (at = corrected.find("speling")) != std::string::npos;)
    corrected.replace(at, 7, "spelling");
  corrected.replace(0, 3, "the");
  for (int id : (*tokenizer_)->encode(corrected)) w.ids.push_back(id);
  postprocessor::PostprocessorStage stage(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{w}}, out);
  ASSERT_EQ(out.pushes.size(), 1u);
  const std::string& got = as<stage::Result>(out.pushes[0].second).items.at(0).text;
  const size_t seen = static_cast<size_t>(std::count(prefix.begin(), prefix.end(), ' '));
  std::string want_text = "The";
  for (int i = 0; i < 100; ++i)
    want_text += static_cast<size_t>(i) < seen ? " spelling, 42" : " speling, 42";
  EXPECT_EQ(got, want_text);
}

TEST_F(WorkerStages, WithKnownWordsTheFirstKnownBeamHypothesisWins) {
  const std::string words = testing::TempDir() + "stage_known_words2.txt";
  std::ofstream(words) << "hello\nworld\nhelp\n";
  config_.postprocessor.known_words = words;
  auto ids_of = [&](const std::string& text) {
    std::vector<int32_t> ids = {0};
    for (int id : (*tokenizer_)->encode(text)) ids.push_back(id);
    return ids;
  };
  stage::DecodedItem w = decoded(1);
  w.text = "helo wrld";         // the input, as the tokenizer forwards it
  w.ids = ids_of("help wrld");  // the best hypothesis: "wrld" is no word
  w.alternatives = {ids_of("helo world"), ids_of("hello world"), ids_of("help world")};
  stage::DecodedItem known_best = decoded(2);
  known_best.text = "helo wrld";
  known_best.ids = ids_of("help world");  // all known: it stays, whatever follows
  known_best.alternatives = {ids_of("hello world")};
  postprocessor::PostprocessorStage stage(*tokenizer_, config_, metrics_);
  worker::WorkerOutbox out;
  stage.handle(stage::Postprocess{{w, known_best}}, out);
  std::map<uint64_t, std::string> got;
  for (const auto& [gw, m] : out.pushes) {
    for (const auto& i : as<stage::Result>(m).items) got[i.request] = i.text;
  }
  EXPECT_EQ(got[1], "hello world");
  EXPECT_EQ(got[2], "help world");
  std::remove(words.c_str());
}

TEST_F(WorkerStages, WarmUpLeavesTheStagesReadyAndEmpty) {
  config_.decoder.warmup_batch_size = 20;  // more than the 8 slots: capped
  config_.decoder.max_new_tokens = 2;      // shorter than the warm-up's 4 steps: capped
  decoder::DecoderStage decoder(*model_, config_, metrics_);
  EXPECT_TRUE(decoder.warm_up());
  EXPECT_EQ(decoder.free_slots(), 8);
  EXPECT_FALSE(decoder.has_pending_work());
  encoder::EncoderStage encoder(*model_, config_, metrics_);
  EXPECT_TRUE(encoder.warm_up());
  config_.decoder.warmup_batch_size = 0;
  config_.encoder.warmup_batch_size = 0;
  EXPECT_FALSE(decoder::DecoderStage(*model_, config_, metrics_).warm_up());
  EXPECT_FALSE(encoder::EncoderStage(*model_, config_, metrics_).warm_up());
  // A warmed decoder still decodes exactly as the engine does.
  worker::WorkerOutbox out;
  config_.decoder.max_new_tokens = 12;
  config_.decoder.warmup_batch_size = 4;
  decoder::DecoderStage warmed(*model_, config_, metrics_);
  ASSERT_TRUE(warmed.warm_up());
  warmed.handle(stage::Decode{{encoded(1, "hello world")}}, out);
  while (warmed.has_pending_work()) warmed.work(out);
  const auto want = reference("hello world", 1);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(as<stage::Decoded>(out.sends[0].message).items.at(0).ids,
            std::vector<int32_t>(want.begin(), want.end()));
}

}  // namespace
}  // namespace seqpipe
