// The pipeline configuration: the shipped file, overrides and endpoint resolution (errors:
// config_errors_test.cc; sizing and the model's settings: config_sizing_test.cc).
#include "seqpipe/config/config.h"

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
#include "seqpipe/generation/model_files.h"

namespace seqpipe::config {
namespace {

using seqpipe::test_util::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// The shipped file and the reference

TEST(ConfigFile, ShippedFileLoadsAndEqualsTheBuiltInDefaults) {
  const PipelineConfig loaded = load_config(kShippedConfig);
  EXPECT_EQ(to_yaml(loaded), to_yaml(PipelineConfig{}));  // a readable diff if not
  EXPECT_TRUE(loaded == PipelineConfig{});
}

TEST(ConfigFile, ShippedFileSpellsOutEveryKey) {
  // The file is the user-facing reference: a key missing from it is undocumented.
  // The per-model keys are shown commented out: set there, they would hide every model's own.
  const YAML::Node root = YAML::LoadFile(kShippedConfig);
  const std::string text = read_text(kShippedConfig);
  const std::vector<std::string> per_model = model_config_keys();
  for (const std::string& key : config_keys()) {
    const size_t dot = key.find('.');
    const YAML::Node node =
        dot == std::string::npos ? root[key] : root[key.substr(0, dot)][key.substr(dot + 1)];
    if (std::find(per_model.begin(), per_model.end(), key) == per_model.end()) {
      EXPECT_TRUE(node.IsDefined()) << key << " is missing from config/pipeline.yaml";
    } else {
      EXPECT_FALSE(node.IsDefined())
          << key << " is the model's: config/pipeline.yaml must not set it";
      EXPECT_THAT(text, HasSubstr("  # " + key.substr(dot + 1) + ": "))
          << key << " is missing (commented out) from config/pipeline.yaml";
    }
  }
}

TEST(ConfigFile, ReferenceDocumentNamesEveryKey) {
  const std::string doc = read_text(kSourceDir + "/docs/CONFIG.md");
  ASSERT_FALSE(doc.empty());
  for (const std::string& key : config_keys()) {
    EXPECT_THAT(doc, HasSubstr("`" + key + "`")) << key << " is missing from docs/CONFIG.md";
  }
}

TEST(ConfigFile, KeysAreListedInFileOrder) {
  const std::vector<std::string> keys = config_keys();
  ASSERT_GE(keys.size(), 35u);
  EXPECT_EQ(keys.front(), "runtime_dir");
  EXPECT_EQ(keys[1], "model.dir");
  EXPECT_EQ(keys.back(), "security.allow_plaintext");
}

TEST(ConfigFile, EmptyDocumentAndEmptySectionsTakeDefaults) {
  EXPECT_TRUE(load_config_text("", "empty.yaml") == PipelineConfig{});
  EXPECT_TRUE(load_config_text("# only a comment\n", "c.yaml") == PipelineConfig{});
  EXPECT_TRUE(load_config_text("batcher:\ndecoder:\n", "s.yaml") == PipelineConfig{});
}

TEST(ConfigFile, MissingKeysKeepTheirDefaults) {
  const PipelineConfig c = load_config_text(
      "batcher:\n  max_batch_size: 16\n  preferred_batch_sizes: [4, 8]\n"
      "decoder:\n  num_slots: 64\n",
      "partial.yaml");
  EXPECT_EQ(c.batcher.max_batch_size, 16);
  EXPECT_THAT(c.batcher.preferred_batch_sizes, ElementsAre(4, 8));
  EXPECT_EQ(c.batcher.max_queue_delay_us, 2000u);
  EXPECT_EQ(c.decoder.num_slots, 64);
  EXPECT_EQ(c.decoder.max_beams, 8);
  EXPECT_EQ(c.gateway.client_endpoint, "tcp://127.0.0.1:5555");
}

TEST(ConfigFile, ToYamlRoundTripsAChangedConfig) {
  PipelineConfig c;
  c.runtime_dir = "/run/seqpipe-test";
  c.model.dir = "/models/my model";
  c.gateway.results_endpoint = "ipc://{runtime_dir}/out.sock";
  c.gateway.max_message_bytes = 4 << 20;
  c.batcher.preferred_batch_sizes = {};
  c.batcher.max_queue_delay_us = 0;
  c.encoder.threads = 0;
  c.decoder.max_new_tokens = 200;
  c.postprocessor.replicas = 1;
  c.decoder.hub_endpoints = {"ipc://{runtime_dir}/b1-dec.sock", "tcp://10.0.0.2:5600"};
  const std::string yaml = to_yaml(c);
  EXPECT_THAT(yaml, HasSubstr("max_batch_size: 32"));
  EXPECT_THAT(yaml, HasSubstr("preferred_batch_sizes: []"));
  EXPECT_THAT(yaml, HasSubstr("tokenizer_endpoint: \"\""));
  EXPECT_TRUE(load_config_text(yaml, "round-trip") == c) << yaml;
}

// ---------------------------------------------------------------------------------------------
// Overrides

TEST(ConfigOverrides, ScalarSequenceAndStringValues) {
  const PipelineConfig c = load_config(
      kShippedConfig, {"batcher.max_batch_size=16", "batcher.preferred_batch_sizes=[4, 8]",
                       "gateway.client_endpoint=tcp://0.0.0.0:6000", "decoder.threads=2",
                       "runtime_dir=/run/sp", "security.allow_plaintext=true"});
  EXPECT_EQ(c.batcher.max_batch_size, 16);
  EXPECT_THAT(c.batcher.preferred_batch_sizes, ElementsAre(4, 8));
  EXPECT_EQ(c.gateway.client_endpoint, "tcp://0.0.0.0:6000");
  EXPECT_EQ(c.decoder.threads, 2);
  EXPECT_EQ(c.runtime_dir, "/run/sp");
  EXPECT_TRUE(c.security.allow_plaintext);
  EXPECT_EQ(c.encoder.threads, kAuto);  // untouched (sized only by load_pipeline_config)
}

TEST(ConfigOverrides, NestedKeysOfInheritedWorkerFields) {
  const PipelineConfig c = load_config_text(
      "", "t", {"encoder.replicas=1", "postprocessor.credits=9", "tokenizer.metrics_port=9200"});
  EXPECT_EQ(c.encoder.replicas, 1);
  EXPECT_EQ(c.postprocessor.credits, 9);
  EXPECT_EQ(c.tokenizer.metrics_port, 9200);
  EXPECT_EQ(c.decoder.replicas, kAuto);
}

TEST(ConfigOverrides, HubEndpointListsAreCheckedAndResolved) {
  PipelineConfig c = load_config_text(
      "encoder:\n  hub_endpoints: [\"ipc://{runtime_dir}/b1-enc.sock\", \"tcp://10.0.0.2:5601\"]\n",
      "t", {"tokenizer.hub_endpoints=[ipc:///run/g1.sock, ipc:///run/g2.sock]"});
  EXPECT_THAT(c.encoder.hub_endpoints,
              ElementsAre("ipc://{runtime_dir}/b1-enc.sock", "tcp://10.0.0.2:5601"));
  EXPECT_THAT(c.tokenizer.hub_endpoints, ElementsAre("ipc:///run/g1.sock", "ipc:///run/g2.sock"));
  EXPECT_TRUE(c.decoder.hub_endpoints.empty());
  c = resolve_endpoints(c, "/run/sp");
  EXPECT_THAT(c.encoder.hub_endpoints,
              ElementsAre("ipc:///run/sp/b1-enc.sock", "tcp://10.0.0.2:5601"));
  auto error_of = [](const std::string& yaml, std::vector<std::string> overrides = {}) {
    try {
      load_config_text(yaml, "t.yaml", overrides);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_THAT(error_of("encoder:\n  hub_endpoints: [\"\"]\n"),
              HasSubstr("encoder.hub_endpoints[0] must not be empty"));
  EXPECT_THAT(error_of("encoder:\n  hub_endpoints: [\"http://x\"]\n"),
              HasSubstr("encoder.hub_endpoints[0] must start with tcp://, ipc:// or inproc://"));
  EXPECT_THAT(error_of("encoder:\n  hub_endpoints: ipc:///a.sock\n"),
              HasSubstr("must be a list of endpoints"));
  EXPECT_THAT(
      error_of("", {"encoder.credits=1", "encoder.hub_endpoints=[ipc:///a.sock, ipc:///b.sock]"}),
      HasSubstr("encoder.credits must be >= the number of encoder.hub_endpoints (2)"));
  EXPECT_THAT(error_of("", {"decoder.num_slots=12",
                            "decoder.hub_endpoints=[ipc:///a.sock, ipc:///b.sock]"}),
              HasSubstr("decoder.max_beams must be <= decoder.num_slots / the number of "
                        "decoder.hub_endpoints (12 / 2)"));
}

TEST(ConfigOverrides, ApplyAfterTheFileInOrder) {
  const PipelineConfig c =
      load_config_text("batcher:\n  max_batch_size: 8\n  preferred_batch_sizes: [8]\n", "t",
                       {"batcher.max_batch_size=64", "batcher.max_batch_size=48"});
  EXPECT_EQ(c.batcher.max_batch_size, 48);
}

TEST(ConfigOverrides, EmptyValues) {
  const PipelineConfig c =
      load_config_text("gateway:\n  tokenizer_endpoint: tcp://127.0.0.1:7000\n", "t",
                       {"gateway.tokenizer_endpoint=", "batcher.preferred_batch_sizes=[]"});
  EXPECT_EQ(c.gateway.tokenizer_endpoint, "");
  EXPECT_TRUE(c.batcher.preferred_batch_sizes.empty());
}

TEST(ConfigFile, TheNoisyChannelsCountsGoTogetherAndNeedAspell) {
  const std::string aspell = "postprocessor:\n  aspell_dictionary: /usr/lib/aspell/en_US.multi\n";
  EXPECT_THAT(load_error(aspell + "  word_counts: w.tsv\n"),
              HasSubstr("postprocessor.edit_counts and postprocessor.word_counts go together"));
  EXPECT_THAT(load_error(aspell + "  edit_counts: e.tsv\n"),
              HasSubstr("postprocessor.edit_counts and postprocessor.word_counts go together"));
  EXPECT_THAT(load_error("postprocessor:\n  word_counts: w.tsv\n  edit_counts: e.tsv\n"),
              HasSubstr("postprocessor.word_counts needs postprocessor.aspell_dictionary"));
  const auto c = load_config_text(aspell + "  word_counts: w.tsv\n  edit_counts: e.tsv\n", "t");
  EXPECT_EQ(c.postprocessor.word_counts, "w.tsv");
  EXPECT_EQ(c.postprocessor.edit_counts, "e.tsv");
}

TEST(ConfigOverrides, CanFixACrossFieldConflictOfTheFile) {
  // Cross-field checks run once, after every override.
  const std::string yaml = "decoder:\n  num_slots: 4\n";
  EXPECT_THAT(load_error(yaml), HasSubstr("decoder.max_beams must be <= decoder.num_slots (4)"));
  EXPECT_EQ(load_config_text(yaml, "t", {"decoder.max_beams=4"}).decoder.max_beams, 4);
}

// ---------------------------------------------------------------------------------------------
// Endpoints

TEST(ConfigEndpoints, EmptyEndpointsBecomeSocketsInTheRuntimeDir) {
  const PipelineConfig c = resolve_endpoints(PipelineConfig{}, "/run/user/1000/seqpipe/");
  EXPECT_EQ(c.runtime_dir, "/run/user/1000/seqpipe");
  EXPECT_EQ(c.gateway.client_endpoint, "tcp://127.0.0.1:5555");
  EXPECT_EQ(c.gateway.tokenizer_endpoint, "ipc:///run/user/1000/seqpipe/tokenizer.sock");
  EXPECT_EQ(c.gateway.results_endpoint, "ipc:///run/user/1000/seqpipe/results.sock");
  EXPECT_EQ(c.batcher.ingress_endpoint, "ipc:///run/user/1000/seqpipe/batcher-in.sock");
  EXPECT_EQ(c.batcher.encoder_endpoint, "ipc:///run/user/1000/seqpipe/encoder.sock");
  EXPECT_EQ(c.batcher.decoder_endpoint, "ipc:///run/user/1000/seqpipe/decoder.sock");
  EXPECT_EQ(c.batcher.postprocessor_endpoint, "ipc:///run/user/1000/seqpipe/postprocessor.sock");
  EXPECT_TRUE(resolve_endpoints(c, c.runtime_dir) == c);  // idempotent
}

TEST(ConfigEndpoints, PlaceholderIsReplaced) {
  const PipelineConfig loaded = load_config_text(
      "gateway:\n  client_endpoint: ipc://{runtime_dir}/clients.sock\n"
      "batcher:\n  encoder_endpoint: tcp://10.0.0.2:7001\n",
      "t",
      {"batcher.decoder_endpoint=ipc://{runtime_dir}/dec-{runtime_dir}.sock",
       "security.allow_plaintext=true"});
  const PipelineConfig c = resolve_endpoints(loaded, "/tmp/sp");
  EXPECT_EQ(c.gateway.client_endpoint, "ipc:///tmp/sp/clients.sock");
  EXPECT_EQ(c.batcher.encoder_endpoint, "tcp://10.0.0.2:7001");
  EXPECT_EQ(c.batcher.decoder_endpoint, "ipc:///tmp/sp/dec-/tmp/sp.sock");
}

TEST(ConfigEndpoints, RuntimeDirMustBeAbsolute) {
  EXPECT_THAT(
      [] { resolve_endpoints(PipelineConfig{}, "run/seqpipe"); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr("runtime_dir must be an absolute path")));
  EXPECT_THROW(resolve_endpoints(PipelineConfig{}, ""), ConfigError);
}

TEST(ConfigEndpoints, IpcPathTooLongForAUnixSocket) {
  const std::string dir = "/" + std::string(100, 'd');
  EXPECT_THAT(
      [&] { resolve_endpoints(PipelineConfig{}, dir); },
      ::testing::ThrowsMessage<ConfigError>(
          AllOf(HasSubstr("gateway.tokenizer_endpoint: the ipc path"), HasSubstr("at most 107"))));
}

TEST(ConfigEndpoints, EndpointsThatBecomeEqualAreAnError) {
  PipelineConfig c;
  c.batcher.ingress_endpoint = "ipc:///run/sp/a.sock";
  c.batcher.encoder_endpoint = "ipc://{runtime_dir}/a.sock";
  EXPECT_NO_THROW(validate(c));  // different until the runtime directory is known
  EXPECT_THAT([&] { resolve_endpoints(c, "/run/sp"); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr(
                  "batcher.encoder_endpoint and batcher.ingress_endpoint are the same endpoint")));
}

TEST(ConfigHubReplicas, ReplicaEndpointsAreConsecutive) {
  EXPECT_EQ(replica_endpoint("tcp://127.0.0.1:5555", 0), "tcp://127.0.0.1:5555");
  EXPECT_EQ(replica_endpoint("tcp://127.0.0.1:5555", 2), "tcp://127.0.0.1:5557");
  EXPECT_EQ(replica_endpoint("tcp://eth0:5557", 1), "tcp://eth0:5558");
  EXPECT_EQ(replica_endpoint("ipc:///run/sp/gateway.sock", 1), "ipc:///run/sp/gateway-2.sock");
  EXPECT_EQ(replica_endpoint("ipc:///run/s.p/gw", 1), "ipc:///run/s.p/gw-2");
}

TEST(ConfigHubReplicas, WorkersServeEveryReplicaAndClientsAreGivenThemAll) {
  PipelineConfig loaded = load_config_text(
      "gateway:\n  replicas: 2\n  metrics_port: 9200\n  http_endpoint: 127.0.0.1:8000\n"
      "  grpc_endpoint: 127.0.0.1:8100\n"
      "batcher:\n  replicas: 3\n  metrics_port: 9300\n",
      "t", {});
  const PipelineConfig c = resolve_endpoints(loaded, "/run/sp");
  EXPECT_EQ(
      c.tokenizer.hub_endpoints,
      (std::vector<std::string>{"ipc:///run/sp/tokenizer.sock", "ipc:///run/sp/tokenizer-2.sock"}));
  EXPECT_EQ(
      c.gateway.batcher_endpoints,
      (std::vector<std::string>{"ipc:///run/sp/batcher-in.sock", "ipc:///run/sp/batcher-in-2.sock",
                                "ipc:///run/sp/batcher-in-3.sock"}));
  EXPECT_EQ(c.decoder.hub_endpoints.size(), 3u);
  EXPECT_EQ(c.postprocessor.hub_endpoints.back(), "ipc:///run/sp/postprocessor-3.sock");
  EXPECT_EQ(client_endpoints(c), "tcp://127.0.0.1:5555,tcp://127.0.0.1:5556");
  EXPECT_TRUE(gateway_replica_overrides(c, 0).empty());
  EXPECT_EQ(
      gateway_replica_overrides(c, 1),
      (std::vector<std::string>{"gateway.client_endpoint=tcp://127.0.0.1:5556",
                                "gateway.tokenizer_endpoint=ipc:///run/sp/tokenizer-2.sock",
                                "gateway.results_endpoint=ipc:///run/sp/results-2.sock",
                                "gateway.metrics_port=9201", "gateway.http_endpoint=127.0.0.1:8001",
                                "gateway.grpc_endpoint=127.0.0.1:8101"}));
  EXPECT_EQ(batcher_replica_overrides(c, 2).back(), "batcher.metrics_port=9302");
  EXPECT_TRUE(resolve_endpoints(c, "/run/sp") == c);  // idempotent
}

TEST(ConfigHubReplicas, WhatReplicasCannotShareIsRefused) {
  EXPECT_THAT(load_error("gateway:\n  replicas: 2\n"),
              HasSubstr("batcher.metrics_port 9101 overlaps gateway.metrics_port 9100..9101"));
  EXPECT_THAT(load_error("gateway:\n  replicas: 2\n  metrics_port: 0\n"
                         "  client_endpoint: tcp://127.0.0.1:*\n"),
              HasSubstr("gateway.client_endpoint must name a fixed port"));
  EXPECT_THAT(load_error("batcher:\n  replicas: 3\n  metrics_port: 0\nencoder:\n  credits: 2\n"),
              HasSubstr("encoder.credits must be >= its hub's replicas (3)"));
}

TEST(ConfigEndpoints, ChooseRuntimeDir) {
  EXPECT_EQ(choose_runtime_dir("/srv/sp", "/run/user/7", 7), "/srv/sp");
  EXPECT_EQ(choose_runtime_dir("", "/run/user/7", 7), "/run/user/7/seqpipe");
  EXPECT_EQ(choose_runtime_dir("", nullptr, 7), "/tmp/seqpipe-7");
  EXPECT_EQ(choose_runtime_dir("", "", 7), "/tmp/seqpipe-7");
  EXPECT_EQ(choose_runtime_dir("", "relative/dir", 7), "/tmp/seqpipe-7");  // ignored, as XDG says
}

TEST(ConfigLoadPipeline, ReadsTheFileAppliesOverridesAndResolvesEndpoints) {
  const LoadedConfig loaded =
      load_pipeline_config(kShippedConfig, {"runtime_dir=/run/sp", "batcher.max_batch_size=64"});
  EXPECT_EQ(loaded.path, kShippedConfig);
  EXPECT_EQ(loaded.config.batcher.max_batch_size, 64);
  EXPECT_EQ(loaded.config.runtime_dir, "/run/sp");
  EXPECT_EQ(loaded.config.batcher.encoder_endpoint, "ipc:///run/sp/encoder.sock");
  EXPECT_FALSE(std::filesystem::exists("/run/sp"));  // loading creates nothing
}

TEST(ConfigLoadPipeline, WithoutAPathReadsTheDefaultFileOrTheBuiltInDefaults) {
  TempDir dir;
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const LoadedConfig defaults = load_pipeline_config("", {"runtime_dir=/run/sp"});
  // Sized as load_pipeline_config sized it: the default model directory, from this directory.
  const int sized_threads =
      size_for_cores(available_cores(), decoder_step_params(defaults.config.model.dir))
          .decoder_threads;
  std::filesystem::create_directory(dir.path() + "/config");
  dir.write("config/pipeline.yaml", "decoder:\n  threads: 3\n");
  const LoadedConfig from_file = load_pipeline_config("", {"runtime_dir=/run/sp"});
  std::filesystem::current_path(previous);

  EXPECT_EQ(defaults.path, "");
  EXPECT_EQ(defaults.config.decoder.threads, sized_threads);
  EXPECT_EQ(from_file.path, kDefaultConfigPath);
  EXPECT_EQ(from_file.config.decoder.threads, 3);
}

}  // namespace
}  // namespace seqpipe::config
