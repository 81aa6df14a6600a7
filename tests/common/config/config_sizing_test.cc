// The pipeline configuration's sizing (auto replicas and threads from the cores) and the model's
// settings (<model.dir>/seqpipe.yaml).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../test_util.h"
#include "config_test_util.h"
#include "seqpipe/config/config.h"
#include "seqpipe/generation/model_files.h"

namespace seqpipe::config {
namespace {

using seqpipe::test_util::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---------------------------------------------------------------------------------------------
// Sizing: auto replicas and threads from the cores

TEST(ConfigSizing, OneDecoderTakesTheCoresOfASmallMachine) {
  const Sizing two = size_for_cores(2);
  EXPECT_EQ(two.decoder_replicas, 1) << "a second decoder on 2 cores only competes for them";
  EXPECT_EQ(two.decoder_threads, 2);
  EXPECT_EQ(two.encoder_replicas, 1);
  EXPECT_EQ(two.encoder_threads, 2);
  EXPECT_EQ(two.tokenizer_replicas, 1);
  EXPECT_EQ(two.postprocessor_replicas, 1);
  const Sizing one = size_for_cores(1);
  EXPECT_EQ(one.decoder_threads, 1);
  EXPECT_EQ(one.encoder_threads, 1);
  EXPECT_EQ(size_for_cores(0).decoder_threads, 1) << "never less than one of each";
}

TEST(ConfigSizing, LargerMachinesGetMoreReplicasEachWithItsShareOfTheCores) {
  const Sizing eight = size_for_cores(8);
  EXPECT_EQ(eight.decoder_replicas, 1);
  EXPECT_EQ(eight.decoder_threads, 8);
  EXPECT_EQ(eight.tokenizer_replicas, 2);
  const Sizing sixteen = size_for_cores(16);
  EXPECT_EQ(sixteen.decoder_replicas, 2);
  EXPECT_EQ(sixteen.decoder_threads, 8);
  EXPECT_EQ(sixteen.encoder_replicas, 1);
  EXPECT_EQ(sixteen.tokenizer_replicas, 4);
  const Sizing many = size_for_cores(64);
  EXPECT_EQ(many.decoder_replicas, 8);
  EXPECT_EQ(many.decoder_replicas * many.decoder_threads, 64);
  EXPECT_EQ(many.encoder_replicas, 4);
  EXPECT_EQ(many.encoder_replicas * many.encoder_threads, 64);
}

TEST(ConfigSizing, ASmallModelGetsASingleThreadedEncoderAndDecoderPerCore) {
  // t5-small reads 38.5 M weights a decoder step; the bundled speller 2.1 M, too few to share.
  EXPECT_EQ(decoder_step_params(kSourceDir + "/models/speller-t5"), 2'091'008);
  EXPECT_EQ(decoder_step_params(kSourceDir + "/tests/data/t5-tiny-random"),
            2 * (6 * 64 * 64 + 2 * 64 * 128) + 512 * 64);
  EXPECT_EQ(decoder_step_params("/nonexistent"), 0) << "unknown: sized as a large model";
  const Sizing small = size_for_cores(2, 2'091'008);
  EXPECT_EQ(small.decoder_replicas, 2);
  EXPECT_EQ(small.decoder_threads, 1);
  EXPECT_EQ(small.encoder_replicas, 2);
  EXPECT_EQ(small.encoder_threads, 1);
  EXPECT_EQ(small.tokenizer_replicas, 1);
  const Sizing large = size_for_cores(2, 38'469'632);
  EXPECT_EQ(large.decoder_replicas, 1);
  EXPECT_EQ(large.decoder_threads, 2);
  PipelineConfig c;
  apply_sizing(c, 2, 2'091'008);
  EXPECT_EQ(c.decoder.replicas, 2);
  EXPECT_EQ(c.decoder.threads, 1);
}

TEST(ConfigSizing, OnlyAutoValuesAreSizedAndTheRestIsKept) {
  PipelineConfig c;
  c.decoder.replicas = 3;
  c.encoder.threads = 1;
  apply_sizing(c, 2);
  EXPECT_EQ(c.decoder.replicas, 3);
  EXPECT_EQ(c.decoder.threads, 1) << "three decoders on 2 cores: one thread each";
  EXPECT_EQ(c.encoder.replicas, 1);
  EXPECT_EQ(c.encoder.threads, 1);
  EXPECT_EQ(c.tokenizer.replicas, 1);
  EXPECT_EQ(c.postprocessor.replicas, 1);
  EXPECT_EQ(c.gateway.replicas, 1) << "the hubs are not sized";
}

TEST(ConfigSizing, EngineThreadsOversubscribeWhenTheyOutnumberTheCores) {
  PipelineConfig c;
  apply_sizing(c, 2);  // an encoder and a decoder of 2 threads each on 2 cores
  EXPECT_TRUE(engine_threads_oversubscribe(c, 2));
  c.encoder.threads = c.decoder.threads = 1;
  EXPECT_FALSE(engine_threads_oversubscribe(c, 2));
  EXPECT_TRUE(engine_threads_oversubscribe(c, 1));
}

TEST(ConfigSizing, LoadPipelineConfigSizesTheAutoValuesForThisMachine) {
  const std::string model = "model.dir=" + kSourceDir + "/models/speller-t5";
  const Sizing s = size_for_cores(available_cores(), 2'091'008);
  const LoadedConfig loaded = load_pipeline_config(kShippedConfig, {model, "encoder.replicas=2"});
  EXPECT_EQ(loaded.config.decoder.replicas, s.decoder_replicas);
  EXPECT_EQ(loaded.config.decoder.threads, s.decoder_threads);
  EXPECT_EQ(loaded.config.encoder.replicas, 2);
  EXPECT_EQ(loaded.config.encoder.threads, std::max(1, available_cores() / 2));
  EXPECT_EQ(loaded.config.tokenizer.replicas, s.tokenizer_replicas);
}

// ---------------------------------------------------------------------------------------------
// The model's settings (<model.dir>/seqpipe.yaml)

TEST(ConfigModelSettings, ADirectoryWithoutTheFileHasNone) {
  TempDir dir;
  EXPECT_TRUE(model_overrides(dir.path()).empty());
  EXPECT_TRUE(model_overrides("/nonexistent/model").empty());
}

// A model's config files over their caps (engine/model_files.h) are refused unparsed (a YAML
// parse of a 20 MB config.json took minutes and gigabytes): config.json is then not read for
// sizing (the engine refuses it too), seqpipe.yaml is an error naming the file.
TEST(ConfigModelSettings, ConfigFilesOverTheCapAreRefusedUnparsed) {
  TempDir dir;
  std::string junk(generation::kMaxModelConfigBytes, '0');
  for (size_t i = 1; i < junk.size(); i += 2) junk[i] = ',';
  const std::string fields =
      R"("d_model": 64, "d_ff": 128, "num_layers": 2, "vocab_size": 512, "d_kv": 16)";
  dir.write("config.json", "{" + fields + "}");
  EXPECT_GT(decoder_step_params(dir.path()), 0);
  dir.write("config.json", "{" + fields + R"(, "junk": [)" + junk + "0]}");
  EXPECT_EQ(decoder_step_params(dir.path()), 0);
  const std::string comment(generation::kMaxModelSettingsBytes, '#');
  dir.write("seqpipe.yaml", "model:\n  lower_case_words: 1\n" + comment.substr(30) + "\n");
  EXPECT_EQ(model_overrides(dir.path()).size(), 1u);  // just under the cap
  const std::string file =
      dir.write("seqpipe.yaml", "model:\n  lower_case_words: 1\n" + comment + "\n");
  try {
    model_overrides(dir.path());
    FAIL() << "an oversized seqpipe.yaml was read";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), AllOf(StartsWith(file + ":"), HasSubstr("larger than")));
  }
}

TEST(ConfigModelSettings, RelativePathsAreTheModelDirectorys) {
  TempDir dir;
  dir.write("seqpipe.yaml",
            "model:\n  lower_case_words: 1\ngateway:\n  split_words: 8\npostprocessor:\n"
            "  known_words: /usr/share/dict/words:extra.txt\n  word_counts: counts.tsv\n");
  EXPECT_THAT(
      model_overrides(dir.path()),
      ElementsAre("model.lower_case_words=1", "gateway.split_words=8",
                  "postprocessor.known_words=/usr/share/dict/words:" + dir.path() + "/extra.txt",
                  "postprocessor.word_counts=" + dir.path() + "/counts.tsv"));
}

TEST(ConfigModelSettings, OnlyTheModelsKeysBelongThere) {
  TempDir dir;
  const std::string file = dir.write("seqpipe.yaml",
                                     "model:\n  lower_case_words: 1\n"
                                     "batcher:\n  max_batch_size: 4\n");
  try {
    model_overrides(dir.path());
    FAIL() << "a pipeline key in the model's file was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), AllOf(StartsWith(file + ":4:"), HasSubstr("batcher.max_batch_size"),
                                HasSubstr("not a setting of the model")));
  }
  dir.write("seqpipe.yaml", "model:\n  dir: elsewhere\n");
  EXPECT_THROW(model_overrides(dir.path()), ConfigError);
}

TEST(ConfigModelSettings, LayersDefaultsModelFileSet) {
  TempDir dir;
  const std::string model = dir.path() + "/model";
  std::filesystem::create_directory(model);
  std::ofstream(model + "/seqpipe.yaml")
      << "model:\n  lower_case_words: 1\n  max_input_tokens: 64\ngateway:\n  split_words: 8\n";
  const std::string file =
      dir.write("pipeline.yaml", "model:\n  dir: " + model + "\n  max_input_tokens: 96\n");

  const LoadedConfig plain = load_pipeline_config(file, {"runtime_dir=/run/sp"});
  EXPECT_EQ(plain.model_path, model + "/seqpipe.yaml");
  EXPECT_EQ(plain.config.model.lower_case_words, 1);   // the model's file over the default
  EXPECT_EQ(plain.config.model.max_input_tokens, 96);  // the config file over the model's
  EXPECT_EQ(plain.config.gateway.split_words, 8u);

  const LoadedConfig set =
      load_pipeline_config(file, {"runtime_dir=/run/sp", "gateway.split_words=0"});
  EXPECT_EQ(set.config.gateway.split_words, 0u);  // --set over everything

  // --set model.dir names another model: its file (none here) applies, not the first one's.
  const LoadedConfig other =
      load_pipeline_config(file, {"runtime_dir=/run/sp", "model.dir=" + dir.path()});
  EXPECT_EQ(other.model_path, "");
  EXPECT_EQ(other.config.model.lower_case_words, 0);
}

TEST(ConfigModelSettings, TheBundledSpellerCarriesItsSettings) {
  const std::string model = kSourceDir + "/models/speller-t5";
  const LoadedConfig loaded =
      load_pipeline_config(kShippedConfig, {"runtime_dir=/run/sp", "model.dir=" + model});
  EXPECT_EQ(loaded.config.model.lower_case_words, 1);
  EXPECT_EQ(loaded.config.gateway.split_words, 8u);
  EXPECT_EQ(loaded.config.postprocessor.word_counts, model + "/word_counts.tsv");
  EXPECT_TRUE(std::filesystem::exists(loaded.config.postprocessor.edit_counts));
  EXPECT_TRUE(std::filesystem::exists(loaded.config.postprocessor.confusion_counts));
}

}  // namespace
}  // namespace seqpipe::config
