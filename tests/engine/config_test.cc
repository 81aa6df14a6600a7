// T5Config from a HuggingFace config.json: the fixtures parse to their values, to_json() parses
// back to the same config, and every bad value is refused with the source and key named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "file_test_util.h"
#include "seqpipe/engine/t5_config.h"
#include "test_util.h"

namespace seqpipe::engine {
namespace {

using test::engine_error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kSource[] = "test/config.json";

nlohmann::json fixture_config(const std::string& name) {
  return test::load_json(test::data_dir() + "/" + name + "/config.json");
}

// The error for the v1.0 fixture's config with `key` set to `value` (or removed when null).
std::string error_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = fixture_config("t5-tiny-random");
  if (value.is_null()) {
    j.erase(key);
  } else {
    j[key] = value;
  }
  return engine_error_of([&] { T5Config::from_json_text(j.dump(), kSource); });
}

TEST(ConfigTest, T5v10FixtureParses) {
  const T5Config c = T5Config::from_json_file(test::data_dir() + "/t5-tiny-random/config.json");
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.d_kv, 16);
  EXPECT_EQ(c.d_ff, 128);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_decoder_layers, 2);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.inner_dim(), 64);
  EXPECT_EQ(c.relative_attention_num_buckets, 32);
  EXPECT_EQ(c.relative_attention_max_distance, 128);
  EXPECT_FLOAT_EQ(c.layer_norm_epsilon, 1e-6f);
  EXPECT_EQ(c.feed_forward, FeedForward::kRelu);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.decoder_start_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_EQ(c.pad_token_id, 0);
}

TEST(ConfigTest, T5v11FixtureParsesAsGatedAndUntied) {
  const T5Config c = T5Config::from_json_file(test::data_dir() + "/t5v11-tiny-random/config.json");
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.d_ff, 128);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.feed_forward, FeedForward::kGatedGelu);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(ConfigTest, DefaultsFollowHuggingFace) {
  const T5Config c = T5Config::from_json_text(
      R"({"d_model": 32, "d_kv": 8, "d_ff": 64, "num_heads": 4, "num_layers": 3, "vocab_size": 100})",
      kSource);
  EXPECT_EQ(c.num_decoder_layers, 3) << "num_decoder_layers defaults to num_layers";
  EXPECT_EQ(c.relative_attention_num_buckets, 32);
  EXPECT_EQ(c.relative_attention_max_distance, 128);
  EXPECT_EQ(c.feed_forward, FeedForward::kRelu);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_id, 1);
}

TEST(ConfigTest, ToJsonParsesBackToTheSameConfig) {
  for (const char* name : {"t5-tiny-random", "t5v11-tiny-random"}) {
    const T5Config c = T5Config::from_json_text(fixture_config(name).dump(), name);
    const T5Config back = T5Config::from_json_text(c.to_json(), "to_json");
    EXPECT_EQ(back.d_model, c.d_model) << name;
    EXPECT_EQ(back.d_kv, c.d_kv) << name;
    EXPECT_EQ(back.d_ff, c.d_ff) << name;
    EXPECT_EQ(back.num_heads, c.num_heads) << name;
    EXPECT_EQ(back.num_layers, c.num_layers) << name;
    EXPECT_EQ(back.num_decoder_layers, c.num_decoder_layers) << name;
    EXPECT_EQ(back.vocab_size, c.vocab_size) << name;
    EXPECT_EQ(back.relative_attention_num_buckets, c.relative_attention_num_buckets) << name;
    EXPECT_EQ(back.relative_attention_max_distance, c.relative_attention_max_distance) << name;
    EXPECT_EQ(back.layer_norm_epsilon, c.layer_norm_epsilon) << name;
    EXPECT_EQ(back.feed_forward, c.feed_forward) << name;
    EXPECT_EQ(back.tie_word_embeddings, c.tie_word_embeddings) << name;
    EXPECT_EQ(back.decoder_start_token_id, c.decoder_start_token_id) << name;
    EXPECT_EQ(back.eos_token_id, c.eos_token_id) << name;
    EXPECT_EQ(back.pad_token_id, c.pad_token_id) << name;
  }
}

TEST(ConfigTest, InvalidJsonNamesTheSource) {
  EXPECT_THAT(engine_error_of([] { T5Config::from_json_text("{\"d_model\": 64,", kSource); }),
              AllOf(HasSubstr(kSource), HasSubstr("JSON")));
  EXPECT_THAT(engine_error_of([] { T5Config::from_json_text("[64]", kSource); }),
              AllOf(HasSubstr(kSource), HasSubstr("object")));
}

TEST(ConfigTest, MissingFileNamesThePath) {
  const std::string path = test::data_dir() + "/no-such-model/config.json";
  EXPECT_THAT(engine_error_of([&] { T5Config::from_json_file(path); }), HasSubstr(path));
}

TEST(ConfigTest, MissingRequiredKeyIsNamed) {
  for (const char* key : {"d_model", "d_kv", "d_ff", "num_heads", "num_layers", "vocab_size"}) {
    EXPECT_THAT(
        error_with(key, nullptr),
        AllOf(HasSubstr(kSource), HasSubstr(std::string("'") + key + "'"), HasSubstr("missing")))
        << key;
  }
}

TEST(ConfigTest, DimensionThatIsNotAPositiveIntegerIsNamed) {
  for (const nlohmann::json& bad : {nlohmann::json("64"), nlohmann::json(-64), nlohmann::json(0),
                                    nlohmann::json(64.5), nlohmann::json(true)}) {
    EXPECT_THAT(error_with("d_model", bad), AllOf(HasSubstr(kSource), HasSubstr("'d_model'")))
        << bad;
  }
  EXPECT_THAT(error_with("num_heads", "four"), HasSubstr("'num_heads'"));
  EXPECT_THAT(error_with("vocab_size", -1), HasSubstr("'vocab_size'"));
}

TEST(ConfigTest, UnsupportedArchitectureIsNamed) {
  EXPECT_THAT(error_with("feed_forward_proj", "gated-silu"),
              AllOf(HasSubstr(kSource), HasSubstr("'feed_forward_proj'"), HasSubstr("gated-silu")));
  EXPECT_THAT(error_with("model_type", "bart"),
              AllOf(HasSubstr(kSource), HasSubstr("'model_type'"), HasSubstr("bart")));
  EXPECT_THAT(error_with("dense_act_fn", "gelu"), HasSubstr("'dense_act_fn'"));
  EXPECT_THAT(error_with("is_decoder", true), HasSubstr("'is_decoder'"));
  EXPECT_THAT(error_with("relative_attention_num_buckets", 31),
              HasSubstr("'relative_attention_num_buckets'"));
  EXPECT_THAT(error_with("layer_norm_epsilon", 0), HasSubstr("'layer_norm_epsilon'"));
  EXPECT_THAT(error_with("tie_word_embeddings", "yes"), HasSubstr("'tie_word_embeddings'"));
}

TEST(ConfigTest, TokenIdOutsideTheVocabularyIsNamed) {
  EXPECT_THAT(error_with("eos_token_id", 512),
              AllOf(HasSubstr(kSource), HasSubstr("'eos_token_id'"), HasSubstr("512")));
  EXPECT_THAT(error_with("decoder_start_token_id", 1000), HasSubstr("'decoder_start_token_id'"));
  EXPECT_THAT(error_with("pad_token_id", -1), HasSubstr("'pad_token_id'"));
  EXPECT_THAT(error_with("eos_token_id", "</s>"), HasSubstr("'eos_token_id'"));
}

}  // namespace
}  // namespace seqpipe::engine

namespace seqpipe::engine {
namespace {

TEST(ConfigTest, TokenIdsAreRangeCheckedBeforeNarrowing) {
  // 2^32 - 1 must not wrap to -1 and slip past the vocabulary check.
  EXPECT_THAT(error_with("eos_token_id", 4294967295u), HasSubstr("eos_token_id"));
  EXPECT_THAT(error_with("decoder_start_token_id", 4294967296u),
              HasSubstr("decoder_start_token_id"));
}

TEST(ConfigTest, MaxDistanceMustExceedTheExactBuckets) {
  // HF's log-spaced buckets divide by log(max_distance / (num_buckets / 2)).
  EXPECT_THAT(error_with("relative_attention_max_distance", 16),
              HasSubstr("relative_attention_max_distance"));
  EXPECT_THAT(error_with("relative_attention_max_distance", 8),
              HasSubstr("relative_attention_max_distance"));
}

}  // namespace
}  // namespace seqpipe::engine
