// The pipeline configuration: the shipped file, overrides, every validation error (each must
// name its key) and endpoint resolution.
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
#include "seqpipe/generation/model_files.h"

namespace seqpipe::config {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const std::string kSourceDir = SEQPIPE_SOURCE_DIR;
const std::string kShippedConfig = kSourceDir + "/config/pipeline.yaml";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The ConfigError message of loading `yaml` as "test.yaml" with `overrides`, or "" if it loads.
std::string load_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    load_config_text(yaml, "test.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

using seqpipe::test_util::TempDir;

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
// Errors: each names its source and key

struct ErrorCase {
  std::string name;
  std::string yaml;
  std::vector<std::string> overrides;
  std::string expected;  // a substring of the message
};

void PrintTo(const ErrorCase& c, std::ostream* os) {
  *os << c.name;
}

class ConfigErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ConfigErrors, NameTheKey) {
  const ErrorCase& c = GetParam();
  EXPECT_THAT(load_error(c.yaml, c.overrides), HasSubstr(c.expected));
}

const ErrorCase kErrorCases[] = {
    {"UnknownSection",
     "model:\n  dir: m\nbatchr:\n  max_batch_size: 8\n",
     {},
     "test.yaml:3: unknown key 'batchr' (did you mean batcher?)"},
    {"UnknownKeyWithSuggestion",
     "batcher:\n  max_batchsize: 8\n",
     {},
     "test.yaml:2: unknown key 'batcher.max_batchsize' (did you mean max_batch_size?)"},
    {"UnknownKeyWithoutSuggestion",
     "decoder:\n  colour: blue\n",
     {},
     "test.yaml:2: unknown key 'decoder.colour'"},
    {"KeyOfAnotherSection", "tokenizer:\n  threads: 2\n", {}, "unknown key 'tokenizer.threads'"},
    {"LatencyBucketsNotAscending",
     "metrics:\n  latency_buckets_us: [100, 100]\n",
     {},
     "metrics.latency_buckets_us must be strictly ascending, got 100 then 100"},
    {"EmptyPathInKnownWords",
     "postprocessor:\n  known_words: /a::/b\n",
     {},
     "test.yaml:2: postprocessor.known_words must be empty or paths separated by ':' (no empty "
     "path), got '/a::/b'"},
    {"NotAnInteger",
     "batcher:\n  max_batch_size: lots\n",
     {},
     "test.yaml:2: batcher.max_batch_size must be an integer, got 'lots'"},
    {"FractionIsNotAnInteger",
     "decoder:\n  num_slots: 1.5\n",
     {},
     "decoder.num_slots must be an integer, got '1.5'"},
    {"ListWhereIntegerExpected",
     "encoder:\n  threads: [1]\n",
     {},
     "encoder.threads must be an integer, got a list"},
    {"NoValueForInteger",
     "encoder:\n  threads:\n",
     {},
     "test.yaml:2: encoder.threads must be an integer, got nothing"},
    {"IntegerOverflow",
     "gateway:\n  max_texts: 99999999999999999999\n",
     {},
     "gateway.max_texts must be an integer in [1, 4096], got '99999999999999999999'"},
    {"ScalarWhereListExpected",
     "batcher:\n  preferred_batch_sizes: 8\n",
     {},
     "batcher.preferred_batch_sizes must be a list of integers like [8, 16], got '8'"},
    {"BadListElement",
     "batcher:\n  preferred_batch_sizes: [8, x]\n",
     {},
     "batcher.preferred_batch_sizes[1] must be an integer, got 'x'"},
    {"MappingWhereStringExpected",
     "model:\n  dir: {a: 1}\n",
     {},
     "model.dir must be a string, got a mapping"},
    {"SectionNotAMapping",
     "batcher: 3\n",
     {},
     "test.yaml:1: batcher must be a mapping of keys, got '3'"},
    {"TopLevelNotAMapping",
     "- a\n- b\n",
     {},
     "test.yaml:1: the top level must be a mapping of sections"},
    {"OutOfRange",
     "batcher:\n  max_batch_size: 0\n",
     {},
     "test.yaml:2: batcher.max_batch_size must be an integer in [1, 1024], got 0"},
    {"NegativeUnsigned",
     "gateway:\n  default_timeout_ms: -5\n",
     {},
     "gateway.default_timeout_ms must be an integer in [1, 3600000], got -5"},
    {"PortOutOfRange",
     "gateway:\n  metrics_port: 70000\n",
     {},
     "gateway.metrics_port must be an integer in [0, 65535], got 70000"},
    {"ReplicasNegative",
     "encoder:\n  replicas: -1\n",
     {},
     "encoder.replicas must be an integer in [0, 64], got -1"},
    {"TooManyBeams",
     "decoder:\n  max_beams: 17\n",
     {},
     "decoder.max_beams must be an integer in [1, 16], got 17"},
    {"EmptyModelDir", "model:\n  dir: \"\"\n", {}, "test.yaml:2: model.dir must not be empty"},
    {"MetricsAddressNotIpv4",
     "metrics:\n  address: localhost\n",
     {},
     "test.yaml:2: metrics.address must be an IPv4 address such as 127.0.0.1 or 0.0.0.0, got "
     "'localhost'"},
    {"RelativeRuntimeDir",
     "runtime_dir: run/seqpipe\n",
     {},
     "runtime_dir must be an absolute path"},
    {"BadEndpointScheme",
     "batcher:\n  encoder_endpoint: http://127.0.0.1:80\n",
     {},
     "test.yaml:2: batcher.encoder_endpoint must start with tcp://, ipc:// or inproc://, got "
     "'http://127.0.0.1:80'"},
    {"TcpEndpointWithoutPort",
     "gateway:\n  client_endpoint: tcp://localhost\n",
     {},
     "gateway.client_endpoint must be tcp://HOST:PORT"},
    {"TcpEndpointBadPort",
     "gateway:\n  client_endpoint: tcp://localhost:99999\n",
     {},
     "gateway.client_endpoint must be tcp://HOST:PORT"},
    {"EndpointWithNothingAfterScheme",
     "batcher:\n  decoder_endpoint: ipc://\n",
     {},
     "batcher.decoder_endpoint has nothing after ipc://"},
    {"UnknownPlaceholder",
     "batcher:\n  decoder_endpoint: ipc://{runtimedir}/d.sock\n",
     {},
     "batcher.decoder_endpoint: unknown placeholder in 'ipc://{runtimedir}/d.sock'"},
    {"PreferredSizesUnsorted",
     "batcher:\n  preferred_batch_sizes: [16, 8]\n",
     {},
     "test.yaml:2: batcher.preferred_batch_sizes must be strictly ascending, got 16 then 8"},
    {"PreferredSizesRepeated",
     "batcher:\n  preferred_batch_sizes: [8, 8]\n",
     {},
     "strictly ascending, got 8 then 8"},
    {"PreferredSizeAboveMax",
     "batcher:\n  max_batch_size: 16\n  preferred_batch_sizes: [8, 32]\n",
     {},
     "test.yaml:3: batcher.preferred_batch_sizes[1] = 32 is larger than batcher.max_batch_size "
     "(16)"},
    {"BatchTokensBelowInputTokens",
     "model:\n  max_input_tokens: 512\nbatcher:\n  max_batch_tokens: 256\n",
     {},
     "test.yaml:4: batcher.max_batch_tokens must be >= model.max_input_tokens (512), got 256"},
    {"QueueSmallerThanBatch",
     "batcher:\n  max_queue_size: 16\n",
     {},
     "batcher.max_queue_size must be >= batcher.max_batch_size (32), got 16"},
    {"DefaultPriorityAboveLevels",
     "batcher:\n  priority_levels: 2\n  default_priority_level: 3\n",
     {},
     "test.yaml:3: batcher.default_priority_level must be <= batcher.priority_levels (2), got 3"},
    {"MoreTextsThanQueue",
     "gateway:\n  max_texts: 2048\n",
     {},
     "gateway.max_texts must be <= batcher.max_queue_size (1024), got 2048"},
    {"BeamsAboveSlots",
     "decoder:\n  num_slots: 4\n  max_beams: 8\n",
     {},
     "test.yaml:3: decoder.max_beams must be <= decoder.num_slots (4)"},
    {"DefaultTimeoutAboveMax",
     "gateway:\n  default_timeout_ms: 5000\n  max_timeout_ms: 2000\n",
     {},
     "test.yaml:2: gateway.default_timeout_ms must be <= gateway.max_timeout_ms (2000), got 5000"},
    {"TextLargerThanMessage",
     "gateway:\n  max_message_bytes: 2048\n  max_text_bytes: 4096\n",
     {},
     "gateway.max_text_bytes must be <= gateway.max_message_bytes (2048), got 4096"},
    {"SameEndpointTwice",
     "batcher:\n  encoder_endpoint: tcp://127.0.0.1:7000\n  decoder_endpoint: "
     "tcp://127.0.0.1:7000\n",
     {},
     "test.yaml:3: batcher.decoder_endpoint and batcher.encoder_endpoint are the same endpoint "
     "'tcp://127.0.0.1:7000'"},
    {"EndpointEqualToAnotherDefault",
     "gateway:\n  results_endpoint: ipc://{runtime_dir}/decoder.sock\n",
     {},
     "batcher.decoder_endpoint and gateway.results_endpoint are the same endpoint"},
    {"MetricsPortsOverlap",
     "encoder:\n  replicas: 2\n  metrics_port: 9099\n",
     {},
     "test.yaml:3: encoder.metrics_port 9099..9100 overlaps gateway.metrics_port 9100"},
    {"MetricsPortPastTheLastPort",
     "decoder:\n  replicas: 4\n  metrics_port: 65534\n",
     {},
     "decoder.metrics_port + decoder.replicas - 1 must be <= 65535"},
    {"MalformedYamlHasTheLine",
     "batcher:\n  max_batch_size: 8\n  preferred_batch_sizes: [8, 16\n  metrics_port: 1\n",
     {},
     "test.yaml:4:"},
    {"MalformedYamlSaysSo", "batcher:\n\tmax_batch_size: 8\n", {}, "not valid YAML"},
    {"DuplicateKey",
     "batcher:\n  max_batch_size: 8\n  max_queue_size: 64\n  max_batch_size: 16\n",
     {},
     "test.yaml:4: duplicate key 'batcher.max_batch_size' (first at line 2)"},
    {"DuplicateSection",
     "decoder:\n  threads: 1\ndecoder:\n  threads: 2\n",
     {},
     "test.yaml:3: duplicate key 'decoder' (first at line 1)"},
    {"SetWithoutEquals",
     "",
     {"batcher.max_batch_size"},
     "--set batcher.max_batch_size: expected key=value"},
    {"SetWithoutKey", "", {"=8"}, "--set =8: expected key=value"},
    {"SetUnknownKey",
     "",
     {"batcher.max_batchsize=8"},
     "--set batcher.max_batchsize=8: unknown key 'batcher.max_batchsize' (did you mean "
     "batcher.max_batch_size?)"},
    {"SetSection", "", {"batcher=8"}, "--set batcher=8: unknown key 'batcher'"},
    {"SetWrongType",
     "",
     {"decoder.threads=abc"},
     "--set decoder.threads=abc: decoder.threads must be an integer, got 'abc'"},
    {"SetOutOfRange",
     "",
     {"batcher.max_batch_size=0"},
     "--set batcher.max_batch_size=0: batcher.max_batch_size must be an integer in [1, 1024], got "
     "0"},
    {"SetEmptyInteger",
     "",
     {"decoder.threads="},
     "--set decoder.threads=: decoder.threads must be an integer, got nothing"},
    {"SetMalformedList",
     "",
     {"batcher.preferred_batch_sizes=[4,"},
     "--set batcher.preferred_batch_sizes=[4,: batcher.preferred_batch_sizes: value is not valid "
     "YAML"},
    {"SetBadEndpoint",
     "",
     {"batcher.encoder_endpoint=localhost:5"},
     "--set batcher.encoder_endpoint=localhost:5: batcher.encoder_endpoint must start with tcp://"},
    {"PlainTextHubBeyondLoopback",
     "gateway:\n  client_endpoint: tcp://0.0.0.0:5555\n",
     {},
     "test.yaml:2: gateway.client_endpoint binds 'tcp://0.0.0.0:5555' beyond loopback in plain "
     "text"},
    {"PlainTextHubOnAHostName",
     "batcher:\n  encoder_endpoint: tcp://batcher:5561\n",
     {},
     "test.yaml:2: batcher.encoder_endpoint binds 'tcp://batcher:5561' beyond loopback"},
    // ZeroMQ binds what follows "source;": 0.0.0.0 here, though the endpoint starts with 127.
    {"PlainTextHubBehindASourceAddress",
     "gateway:\n  client_endpoint: tcp://127.0.0.1:1;0.0.0.0:18514\n",
     {},
     "test.yaml:2: gateway.client_endpoint binds 'tcp://127.0.0.1:1;0.0.0.0:18514' beyond "
     "loopback"},
    {"PlainTextHubOnANameStartingWith127",
     "gateway:\n  client_endpoint: tcp://127.example.com:5555\n",
     {},
     "test.yaml:2: gateway.client_endpoint binds 'tcp://127.example.com:5555' beyond loopback"},
    {"HttpBeyondLoopbackEvenWithKeys",
     "gateway:\n  http_endpoint: 0.0.0.0:8000\nsecurity:\n  server_key: k/hub\n  client_key: "
     "k/w\n  allowed_clients: k\n",
     {},
     "test.yaml:2: gateway.http_endpoint '0.0.0.0:8000' serves HTTP beyond loopback"},
    {"GrpcBeyondLoopback",
     "gateway:\n  grpc_endpoint: 0.0.0.0:8001\n",
     {},
     "test.yaml:2: gateway.grpc_endpoint '0.0.0.0:8001' serves gRPC beyond loopback"},
    {"ServerKeyWithoutClientKey",
     "security:\n  server_key: k/hub\n  allowed_clients: k\n",
     {},
     "test.yaml:2: security.client_key must be set with security.server_key"},
    {"ClientKeyWithoutServerKey",
     "security:\n  client_key: k/w\n",
     {},
     "test.yaml:2: security.client_key has no effect without security.server_key"},
    {"NotABoolean",
     "security:\n  allow_plaintext: yes\n",
     {},
     "test.yaml:2: security.allow_plaintext must be true or false, got 'yes'"},
    {"SetCausesCrossFieldError",
     "",
     {"batcher.preferred_batch_sizes=[8, 64]"},
     "--set batcher.preferred_batch_sizes=[8, 64]: batcher.preferred_batch_sizes[1] = 64 is larger "
     "than "
     "batcher.max_batch_size (32)"},
};

INSTANTIATE_TEST_SUITE_P(ConfigValidation, ConfigErrors, ::testing::ValuesIn(kErrorCases),
                         [](const ::testing::TestParamInfo<ErrorCase>& info) {
                           return info.param.name;
                         });

TEST(ConfigSecurity, WhatMayListenBeyondLoopback) {
  // Loopback and ipc:// need no keys; beyond loopback, keys or an explicit allow_plaintext.
  EXPECT_NO_THROW(
      load_config_text("gateway:\n  client_endpoint: tcp://127.0.0.1:5555\n"
                       "  tokenizer_endpoint: tcp://localhost:5556\n",
                       "t"));
  EXPECT_NO_THROW(
      load_config_text("gateway:\n  client_endpoint: tcp://0.0.0.0:5555\n"
                       "security:\n  server_key: k/hub\n  client_key: k/w\n"
                       "  allowed_clients: k\n",
                       "t"));
  EXPECT_NO_THROW(load_config_text(
      "gateway:\n  client_endpoint: tcp://0.0.0.0:5555\n  http_endpoint: 0.0.0.0:8000\n", "t",
      {"security.allow_plaintext=true"}));
  EXPECT_NO_THROW(load_config_text("gateway:\n  client_endpoint: tcp://[::1]:5555\n", "t"));
  EXPECT_THROW(load_config_text("gateway:\n  results_endpoint: tcp://eth0:5557\n", "t"),
               ConfigError);
  EXPECT_THROW(load_config_text("batcher:\n  ingress_endpoint: tcp://*:5560\n", "t"), ConfigError);
}

TEST(ConfigErrorsMore, MissingFileNamesTheFile) {
  try {
    load_config("/nonexistent/pipeline.yaml");
    FAIL() << "loaded a missing file";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), StartsWith("/nonexistent/pipeline.yaml: cannot read"));
  }
}

TEST(ConfigErrorsMore, FileErrorsNameTheFile) {
  TempDir dir;
  const std::string path = dir.write("bad.yaml", "batcher:\n  max_batch_size: 0\n");
  try {
    load_config(path);
    FAIL() << "loaded a bad file";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ":2: batcher.max_batch_size must be an integer in [1, 1024], got 0");
  }
}

// A file's parse is kept for the next load of the same text (the gateway loads each model
// version's config over the pipeline's file): a changed file is read as changed, and a kept
// parse still points errors at their lines.
TEST(ConfigFile, AFileLoadedAgainIsReadAsItIsNow) {
  TempDir dir;
  const std::string path = dir.write("p.yaml", "batcher:\n  max_queue_delay_us: 100\n");
  EXPECT_EQ(load_config(path).batcher.max_queue_delay_us, 100);
  EXPECT_EQ(load_config(path).batcher.max_queue_delay_us, 100);
  dir.write("p.yaml", "batcher:\n  max_queue_delay_us: 200\n");
  EXPECT_EQ(load_config(path).batcher.max_queue_delay_us, 200);
  dir.write("p.yaml", "\nbatcher:\n  max_batch_size: 0\n");
  for (int load = 0; load < 2; ++load) {
    EXPECT_THAT([&] { load_config(path); },
                ::testing::ThrowsMessage<ConfigError>(
                    StartsWith(path + ":3: batcher.max_batch_size must be an integer")))
        << "load " << load;
  }
}

TEST(ConfigErrorsMore, ValidateChecksConfigsBuiltInCode) {
  PipelineConfig c;
  EXPECT_NO_THROW(validate(c));
  c.decoder.num_slots = 0;
  EXPECT_THAT([&] { validate(c); },
              ::testing::ThrowsMessage<ConfigError>(
                  HasSubstr("decoder.num_slots must be an integer in [1, 4096], got 0")));
  c = PipelineConfig{};
  c.gateway.max_message_bytes = size_t{1} << 40;
  EXPECT_THROW(validate(c), ConfigError);
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
