// The pipeline configuration's validation errors: each must name its source and key.
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
using ::testing::HasSubstr;
using ::testing::StartsWith;

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

}  // namespace
}  // namespace seqpipe::config
