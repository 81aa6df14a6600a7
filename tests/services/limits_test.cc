// One home for each limit and default (generation/limits.h), which the engine, the client protocol,
// the stage messages, the config, the batcher and the decoder refer to; and the one mapping of
// a request's parameters to the engine's decoding options.
#include "seqpipe/generation/limits.h"

#include <gtest/gtest.h>

#include "decoder/decoder_stage.h"
#include "seqpipe/config/config.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/messages/stage_messages.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe {
namespace {

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Limits, OneDefaultMaxNewTokensFromTheClientToTheEngine) {
  EXPECT_EQ(protocol::GenerateParams{}.max_new_tokens, generation::kDefaultMaxNewTokens);
  EXPECT_EQ(engine::DecodingOptions{}.max_new_tokens, generation::kDefaultMaxNewTokens);
  // {"v": 1, "text": "hello"}: no params, so the server's default.
  const std::string bare = "\x82\xa1v\x01\xa4text\xa5hello";
  protocol::Limits limits;
  auto decoded = protocol::decode_request(bytes_of(bare), limits);
  ASSERT_TRUE(std::holds_alternative<protocol::Request>(decoded));
  EXPECT_EQ(std::get<protocol::Request>(decoded).params.max_new_tokens,
            generation::kDefaultMaxNewTokens);
  limits.max_new_tokens_cap = generation::kDefaultMaxNewTokens - 1;  // a server configured lower
  decoded = protocol::decode_request(bytes_of(bare), limits);
  EXPECT_EQ(std::get<protocol::Request>(decoded).params.max_new_tokens,
            generation::kDefaultMaxNewTokens - 1);
}

TEST(Limits, TheConfigAndTheStageMessagesTakeTheEnginesBounds) {
  config::PipelineConfig c;
  c.decoder.num_slots = 64;
  c.decoder.max_beams = generation::kMaxBeams;
  EXPECT_NO_THROW(config::validate(c));
  EXPECT_THROW(
      config::load_config_text(
          "decoder:\n  max_beams: " + std::to_string(generation::kMaxBeams + 1) + "\n", "t"),
      config::ConfigError);
  EXPECT_THROW(config::load_config_text("decoder:\n  max_new_tokens: " +
                                            std::to_string(generation::kMaxNewTokens + 1) + "\n",
                                        "t"),
               config::ConfigError);

  stage::DecodedItem item;
  item.params.num_beams = generation::kMaxBeams;
  item.alternatives.assign(generation::kMaxBeams - 1, {0, 1});
  EXPECT_TRUE(std::holds_alternative<stage::StageMessage>(
      stage::decode(stage::encode(stage::Decoded{0, {item}}))));
  item.params.num_beams = generation::kMaxBeams + 1;
  EXPECT_TRUE(std::holds_alternative<protocol::Error>(
      stage::decode(stage::encode(stage::Decoded{0, {item}}))));
  item.params.num_beams = 1;
  item.params.max_new_tokens = generation::kMaxNewTokens + 1;
  EXPECT_TRUE(std::holds_alternative<protocol::Error>(
      stage::decode(stage::encode(stage::Decoded{0, {item}}))));
}

TEST(Limits, ASequenceCostsItsSlots) {
  EXPECT_EQ(generation::slot_cost(1), 1);
  EXPECT_EQ(generation::slot_cost(4), 4);
  EXPECT_EQ(generation::slot_cost(0), 1);  // never free
}

TEST(Limits, TheOneMappingOfParamsToDecodingOptions) {
  protocol::GenerateParams p;
  p.max_new_tokens = 17;
  p.num_beams = 4;
  p.length_penalty = 0.5f;
  p.min_new_tokens = 3;
  p.return_scores = true;
  p.priority = 2;
  const engine::DecodingOptions o = decoder::decoding_options(p, false);
  EXPECT_EQ(o.max_new_tokens, 17);
  EXPECT_EQ(o.num_beams, 4);
  EXPECT_EQ(o.length_penalty, 0.5f);
  EXPECT_EQ(o.min_new_tokens, 3);
  EXPECT_TRUE(o.return_scores);
  EXPECT_FALSE(o.early_stopping);
  EXPECT_EQ(o.num_return_sequences, 1);
  EXPECT_EQ(decoder::decoding_options(p, true).num_return_sequences, 4);  // every hypothesis
  EXPECT_NO_THROW(o.validate(o.max_new_tokens + 1));
}

}  // namespace
}  // namespace seqpipe
