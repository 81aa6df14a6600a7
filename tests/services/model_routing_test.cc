// Several model versions in one pipeline, on an injected clock, no sockets: the gateway resolves a
// request's model (or answers not_found at once) and gives its work only to tokenizers of that
// version; the batcher batches only items of one version together and sends each version's work
// only to the encoders, decoders and postprocessors that serve it.
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "../common/test_util.h"
#include "batcher/batcher_hub.h"
#include "gateway/gateway.h"
#include "gateway/http_repository.h"
#include "seqpipe/config/config.h"

namespace seqpipe {
namespace {

using batcher::Role;
const Now t0{SteadyClock::time_point{} + std::chrono::hours(1), 1'700'000'000'000'000};

stage::SequenceItem item(uint64_t request, const std::string& model) {
  stage::SequenceItem w;
  w.request = request;
  w.gateway = "ipc:///tmp/gw.sock";
  w.deadline = Deadline::after(t0, std::chrono::seconds(60));
  w.ids.assign(5, 7);
  w.model = model;
  return w;
}

// How many observations the histogram `name` holds under exactly `labels` (-1: no such series).
int64_t observations(prometheus::Registry& registry, const std::string& name,
                     const std::map<std::string, std::string>& labels) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      std::map<std::string, std::string> have;
      for (const auto& l : metric.label) have[l.name] = l.value;
      if (have == labels) return static_cast<int64_t>(metric.histogram.sample_count);
    }
  }
  return -1;
}

// The requests and the models of the items of one work message.
template <class Work>
std::vector<std::pair<uint64_t, std::string>> items_of(const stage::StageMessage& m) {
  std::vector<std::pair<uint64_t, std::string>> out;
  for (const auto& i : std::get<Work>(m).items) out.emplace_back(i.request, i.model);
  return out;
}

class BatcherModelsTest : public ::testing::Test {
 protected:
  BatcherModelsTest() : registry_(metrics::make_registry()), metrics_(*registry_, "batcher") {
    config_.batcher.max_batch_size = 4;
    config_.batcher.preferred_batch_sizes = {4};
    config_.batcher.max_queue_delay_us = 1000;
  }
  static std::vector<Outbox::Send> sent(const Outbox& out, Role role) {
    std::vector<Outbox::Send> v;
    for (const auto& m : out.sends)
      if (m.link == batcher::link(role) && !std::holds_alternative<stage::Heartbeat>(m.message))
        v.push_back(m);
    return v;
  }
  config::PipelineConfig config_;
  std::shared_ptr<prometheus::Registry> registry_;
  metrics::StageMetrics metrics_;
};

TEST_F(BatcherModelsTest, BatchesHoldOneModelVersionAndGoToItsEncoders) {
  batcher::BatcherHub h(config_.batcher, config_.liveness, metrics_);
  Outbox out;
  h.on_worker(Role::kEncoder, "ea", stage::Ready{2, "a/1"}, t0);
  h.on_worker(Role::kEncoder, "eb", stage::Ready{2, "b/1"}, t0);
  h.on_sequences(stage::Sequence{{item(1, "a/1"), item(2, "b/1"), item(3, "a/1"), item(4, "b/1"),
                                  item(5, "a/1"), item(6, "b/1")}},
                 t0, out);
  h.dispatch(t0 + std::chrono::milliseconds(5), out);  // past max_queue_delay: partial batches go
  auto batches = sent(out, Role::kEncoder);
  ASSERT_EQ(batches.size(), 2u);
  for (const auto& b : batches) {
    const std::string model = b.peer == "ea" ? "a/1" : "b/1";
    const auto items = items_of<stage::Encode>(b.message);
    ASSERT_EQ(items.size(), 3u) << b.peer;
    for (const auto& [request, m] : items) EXPECT_EQ(m, model) << "request " << request;
  }
  // Each version's batches and queue times are its own series.
  const std::string batch_size(metrics::kBatchSize), queue(metrics::kQueueSeconds);
  for (const char* model : {"a", "b"}) {
    const std::map<std::string, std::string> labels{
        {"stage", "batcher"}, {"model", model}, {"version", "1"}};
    EXPECT_EQ(observations(*registry_, batch_size, labels), 1) << model;
    EXPECT_EQ(observations(*registry_, queue, labels), 3) << model;
  }
  EXPECT_EQ(observations(*registry_, batch_size, {{"stage", "batcher"}}), 0);
}

TEST_F(BatcherModelsTest, EachVersionsWorkGoesToItsDecodersAndPostprocessorsOnly) {
  batcher::BatcherHub h(config_.batcher, config_.liveness, metrics_);
  Outbox out;
  h.on_worker(Role::kEncoder, "ea", stage::Ready{1, "a/1"}, t0);
  h.on_worker(Role::kEncoder, "eb", stage::Ready{1, "b/2"}, t0);
  h.on_worker(Role::kDecoder, "da", stage::Ready{8, "a/1"}, t0);
  h.on_worker(Role::kDecoder, "db", stage::Ready{8, "b/2"}, t0);
  h.on_worker(Role::kPostprocessor, "pb", stage::Ready{8, "b/2"}, t0);
  auto encoded = [](uint64_t request, const std::string& model) {
    return stage::next_hop<stage::EncodedItem>(item(request, model));
  };
  h.on_worker(Role::kEncoder, "ea", stage::Encoded{0, {encoded(1, "a/1")}}, t0);
  h.on_worker(Role::kEncoder, "eb", stage::Encoded{0, {encoded(2, "b/2"), encoded(3, "b/2")}}, t0);
  h.dispatch(t0, out);
  auto decodes = sent(out, Role::kDecoder);
  ASSERT_EQ(decodes.size(), 2u);
  for (const auto& d : decodes) {
    if (d.peer == "da") {
      EXPECT_EQ(items_of<stage::Decode>(d.message),
                (std::vector<std::pair<uint64_t, std::string>>{{1, "a/1"}}));
    } else {
      EXPECT_EQ(items_of<stage::Decode>(d.message),
                (std::vector<std::pair<uint64_t, std::string>>{{2, "b/2"}, {3, "b/2"}}));
    }
  }
  EXPECT_EQ(h.credits(Role::kDecoder, "a/1").free_credits("da"), 7);
  EXPECT_EQ(h.credits(Role::kDecoder, "b/2").free_credits("db"), 6);
  // Decoded items of a/1 wait for a postprocessor of a/1: b/2's does not take them, and b/2's
  // are not held up behind them.
  out.clear();
  auto decoded = [](const stage::StageMessage& decode) {
    stage::Decoded d{0, {}};
    for (auto i : std::get<stage::Decode>(decode).items)
      d.items.push_back(stage::next_hop<stage::DecodedItem>(std::move(i)));
    d.credits = static_cast<int32_t>(d.items.size());
    return d;
  };
  for (const auto& d : decodes) h.on_worker(Role::kDecoder, d.peer, decoded(d.message), t0);
  h.dispatch(t0, out);
  auto posts = sent(out, Role::kPostprocessor);
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].peer, "pb");
  EXPECT_EQ(items_of<stage::Postprocess>(posts[0].message),
            (std::vector<std::pair<uint64_t, std::string>>{{2, "b/2"}, {3, "b/2"}}));
  EXPECT_EQ(h.queued(), 1u);  // a/1's decoded item, waiting for a postprocessor of a/1
  out.clear();
  h.on_worker(Role::kPostprocessor, "pa", stage::Ready{1, "a/1"}, t0);
  h.dispatch(t0, out);
  ASSERT_EQ(sent(out, Role::kPostprocessor).size(), 1u);
  EXPECT_EQ(sent(out, Role::kPostprocessor)[0].peer, "pa");
}

class GatewayModelsTest : public ::testing::Test {
 protected:
  GatewayModelsTest()
      : registry_(metrics::make_registry()), stage_(*registry_, "gateway"), gw_(*registry_) {
    root_ =
        std::filesystem::temp_directory_path() / ("seqpipe-gw-repo-" + std::to_string(::getpid()));
    for (const char* version : {"speller/1", "speller/2", "rewriter/1"})
      test_util::write_model_files(root_ / version);
    config_.model.repository = root_.string();
    config_.model.repository_versions = 0;  // both of speller's versions (the default: the newest)
    config_.model.name = "speller";
  }
  ~GatewayModelsTest() override { std::filesystem::remove_all(root_); }
  static std::vector<std::string> request(const std::string& id, std::optional<std::string> model,
                                          std::optional<uint32_t> version = std::nullopt) {
    protocol::Request r;
    r.id = id;
    r.texts = {"teh"};
    r.model = std::move(model);
    r.version = version;
    return {"client", "", protocol::encode_request(r)};
  }
  static protocol::Reply reply_of(const Outbox& out, size_t i) {
    const std::string& bytes = out.replies.at(i).second;
    return std::get<protocol::Reply>(protocol::decode_reply(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())));
  }
  std::filesystem::path root_;
  config::PipelineConfig config_;
  std::shared_ptr<prometheus::Registry> registry_;
  metrics::StageMetrics stage_;
  metrics::GatewayMetrics gw_;
};

TEST_F(GatewayModelsTest, UnknownModelOrVersionIsNotFoundAtOnce) {
  gateway::Gateway g(config_, "ipc:///tmp/results.sock", stage_, gw_);
  Outbox out;
  g.on_client(request("x", "nope"), t0, out);
  g.on_client(request("y", "speller", 3), t0, out);
  ASSERT_EQ(out.replies.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const protocol::Reply reply = reply_of(out, i);
    ASSERT_TRUE(reply.error);
    EXPECT_EQ(reply.error->code, protocol::ErrorCode::kNotFound);
  }
  EXPECT_NE(reply_of(out, 0).error->message.find("'nope'"), std::string::npos);
  EXPECT_EQ(g.waiting(), 0u);
}

TEST_F(GatewayModelsTest, WorkGoesToTokenizersOfItsModelVersion) {
  gateway::Gateway g(config_, "ipc:///tmp/results.sock", stage_, gw_);
  Outbox out;
  g.on_tokenizer("t-rw", stage::Ready{4, "rewriter/1"}, t0);
  g.on_tokenizer("t-sp1", stage::Ready{4, "speller/1"}, t0);
  g.on_client(request("a", std::nullopt), t0, out);  // the default: speller, its highest version
  g.on_client(request("b", "rewriter"), t0, out);
  g.on_client(request("c", "speller", 1), t0, out);
  g.dispatch(t0, out);
  EXPECT_TRUE(out.replies.empty());
  std::map<std::string, std::vector<std::string>> models_by_tokenizer;
  for (const auto& s : out.sends) {
    for (const auto& i : std::get<stage::Tokenize>(s.message).items)
      models_by_tokenizer[s.peer].push_back(i.model);
  }
  EXPECT_EQ(models_by_tokenizer["t-rw"], (std::vector<std::string>{"rewriter/1"}));
  EXPECT_EQ(models_by_tokenizer["t-sp1"], (std::vector<std::string>{"speller/1"}));
  EXPECT_EQ(g.waiting(), 1u);  // speller/2 has no tokenizer yet: its request waits, alone
  out.clear();
  g.on_tokenizer("t-sp2", stage::Ready{1, "speller/2"}, t0);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].peer, "t-sp2");
  EXPECT_EQ(std::get<stage::Tokenize>(out.sends[0].message).items.at(0).model, "speller/2");
}

TEST_F(GatewayModelsTest, ANewCatalogReroutesNewRequestsAndCountsThoseInFlight) {
  gateway::Gateway g(config_, "ipc:///tmp/results.sock", stage_, gw_);
  Outbox out;
  g.on_client(request("a", "speller"), t0, out);  // speller/2, the highest: in flight
  const std::string dir = (root_ / "speller" / "1").string();
  // speller/2 unloading: only speller/1 is routed; the request already in flight keeps its version.
  const std::vector<model_control::CatalogEntry> speller1 = {
      {{"speller", 1, dir}, model_control::version_settings(config_)}};
  const auto in_flight = g.set_models(speller1);
  EXPECT_EQ(in_flight, (model_control::InFlight{{"speller/2", 1}}));
  g.on_client(request("b", "speller"), t0, out);     // now speller/1
  g.on_client(request("c", "speller", 2), t0, out);  // not served any more
  g.on_client(request("d", "rewriter"), t0, out);    // not in the catalog either
  ASSERT_EQ(out.replies.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(reply_of(out, i).error->code, protocol::ErrorCode::kNotFound);
  EXPECT_EQ(g.set_models(speller1), (model_control::InFlight{{"speller/1", 1}, {"speller/2", 1}}));
  EXPECT_EQ(g.models().default_key(), "speller/1");
}

TEST_F(GatewayModelsTest, RequestLatenciesAreLabelledWithTheirModelVersion) {
  gateway::Gateway g(config_, "ipc:///tmp/results.sock", stage_, gw_);
  Outbox out;
  g.on_client(request("a", "rewriter"), t0, out);  // waits for a tokenizer, then expires
  g.on_client(request("b", "nope"), t0, out);      // refused before its model resolves
  g.expire(t0 + std::chrono::hours(1), out);
  ASSERT_EQ(out.replies.size(), 2u);
  const std::string name(metrics::kRequestSeconds);
  EXPECT_EQ(observations(*registry_, name,
                         {{"status", "error"}, {"model", "rewriter"}, {"version", "1"}}),
            1);
  EXPECT_EQ(observations(*registry_, name, {{"status", "error"}}), 1);
  EXPECT_EQ(observations(*registry_, name, {{"status", "ok"}}), 0);
}

// Each version's requests get the per-model settings of its own seqpipe.yaml, layered as its
// replicas layer theirs (config::load_model_version_config): speller/1 splits texts into pieces of
// two words, caps max_new_tokens at 8 and streams its pieces too (it lower-cases words after
// decoding); rewriter/1 has the defaults; speller/2's seqpipe.yaml does not load.
TEST_F(GatewayModelsTest, EachVersionGetsItsOwnPerModelSettings) {
  std::ofstream(root_ / "speller" / "1" / config::kModelConfigName)
      << "gateway:\n  split_words: 2\nmodel:\n  lower_case_words: 1\n"
         "decoder:\n  max_new_tokens: 8\n";
  std::ofstream(root_ / "speller" / "2" / config::kModelConfigName) << "batcher:\n  replicas: 2\n";
  const std::string pipeline_file = (root_ / "pipeline.yaml").string();
  std::ofstream(pipeline_file) << "batcher:\n  max_queue_size: 500\n";
  config::LoadedConfig layers;
  layers.path = pipeline_file;
  layers.overrides = {"model.repository=" + root_.string(), "model.name=speller",
                      "runtime_dir=" + root_.string()};
  gateway::Gateway g(config_, "ipc:///tmp/results.sock", stage_, gw_,
                     config::version_config_loader(layers));
  g.on_tokenizer("t-sp1", stage::Ready{8, "speller/1"}, t0);
  g.on_tokenizer("t-rw", stage::Ready{8, "rewriter/1"}, t0);
  auto generate = [](const std::string& id, const std::string& model, uint32_t version,
                     std::optional<int> max_new_tokens = std::nullopt, bool stream = false) {
    protocol::Request r;
    r.id = id;
    r.texts = {"one two three four five"};
    r.model = model;
    r.version = version;
    r.stream = stream;
    if (max_new_tokens) r.params.max_new_tokens = *max_new_tokens;
    return std::vector<std::string>{"client", "", protocol::encode_request(r)};
  };
  Outbox out;
  g.on_client(generate("sp", "speller", 1, 6), t0, out);
  g.on_client(generate("rw", "rewriter", 1), t0, out);
  g.on_client(generate("rw-long", "rewriter", 1, 40), t0, out);  // under its cap, 64
  g.on_client(generate("rw-stream", "rewriter", 1, std::nullopt, true), t0, out);
  g.on_client(generate("sp-long", "speller", 1, 40), t0, out);  // over its cap, 8
  g.on_client(generate("sp-stream", "speller", 1, 6, true), t0, out);
  g.on_client(generate("sp2", "speller", 2), t0, out);
  g.dispatch(t0, out);
  std::map<std::string, std::vector<stage::TextItem>> items_by_tokenizer;
  for (const auto& send : out.sends) {
    for (const auto& i : std::get<stage::Tokenize>(send.message).items)
      items_by_tokenizer[send.peer].push_back(i);
  }
  // speller/1: its text in three pieces of at most two words, under its own cap; a stream the
  // same, each piece streamed (the gateway sends them in turn).
  ASSERT_EQ(items_by_tokenizer["t-sp1"].size(), 6u);
  std::vector<std::string> pieces;
  for (const auto& i : items_by_tokenizer["t-sp1"]) pieces.push_back(i.text);
  EXPECT_EQ(pieces, (std::vector<std::string>{"one", "two three", "four five", "one", "two three",
                                              "four five"}));
  EXPECT_EQ(items_by_tokenizer["t-sp1"][0].params.max_new_tokens, 6);
  for (size_t k = 0; k < 6; ++k) EXPECT_EQ(items_by_tokenizer["t-sp1"][k].stream, k >= 3);
  // rewriter/1: whole texts; a cap over speller/1's and a stream are its to serve.
  ASSERT_EQ(items_by_tokenizer["t-rw"].size(), 3u);
  EXPECT_EQ(items_by_tokenizer["t-rw"][0].text, "one two three four five");
  EXPECT_EQ(items_by_tokenizer["t-rw"][1].params.max_new_tokens, 40);
  EXPECT_TRUE(items_by_tokenizer["t-rw"][2].stream);
  ASSERT_EQ(out.replies.size(), 2u);
  std::map<std::string, protocol::Error> errors;
  for (size_t i = 0; i < out.replies.size(); ++i) {
    protocol::Reply reply = reply_of(out, i);
    ASSERT_TRUE(reply.error);
    errors[reply.id] = *reply.error;
  }
  EXPECT_EQ(errors["sp-long"].code, protocol::ErrorCode::kInvalidArgument);
  EXPECT_NE(errors["sp-long"].message.find("8"), std::string::npos) << errors["sp-long"].message;
  EXPECT_EQ(errors.count("sp-stream"), 0u);
  // A version whose config does not load: its requests are answered at once, the others served.
  EXPECT_EQ(errors["sp2"].code, protocol::ErrorCode::kUnavailable);
  EXPECT_NE(errors["sp2"].message.find("batcher.replicas"), std::string::npos)
      << errors["sp2"].message;
}

// The supervisor's catalog carries each version's settings: the gateway applies them as sent and
// reads no model file (its loop stalled for seconds parsing a 1 MB config.json). speller/3 is
// served with the message's split_words and token cap though its directory holds no files at
// all; beta/1's config did not load where the supervisor loaded it.
TEST_F(GatewayModelsTest, ACatalogsSettingsComeFromTheMessageWithNoFileRead) {
  int configs_loaded = 0;
  gateway::Gateway g(config_, "ipc:///tmp/results.sock", stage_, gw_,
                     [&](const config::ModelVersion&) {
                       ++configs_loaded;
                       return config_;
                     });
  EXPECT_EQ(configs_loaded, 3);  // the versions served at start, before the loop serves
  model_control::VersionSettings split = model_control::version_settings(config_);
  split.split_words = 2;
  split.limits.max_new_tokens_cap = 8;
  model_control::VersionSettings bad;
  bad.not_loaded = "config.json: over the cap";
  const std::string nowhere = (root_ / "not-on-disk").string();
  g.set_models({{{"speller", 3, nowhere}, split}, {{"beta", 1, nowhere}, bad}});
  EXPECT_EQ(configs_loaded, 3);
  g.on_tokenizer("t-sp3", stage::Ready{8, "speller/3"}, t0);
  auto generate = [](const std::string& id, const std::string& model, int max_new_tokens) {
    protocol::Request r;
    r.id = id;
    r.texts = {"one two three four five"};
    r.model = model;
    r.params.max_new_tokens = max_new_tokens;
    return std::vector<std::string>{"client", "", protocol::encode_request(r)};
  };
  Outbox out;
  g.on_client(generate("sp", "speller", 6), t0, out);
  g.on_client(generate("sp-long", "speller", 40), t0, out);  // over the message's cap, 8
  g.on_client(generate("beta", "beta", 6), t0, out);
  g.dispatch(t0, out);
  std::vector<std::string> pieces;
  for (const auto& send : out.sends) {
    for (const auto& i : std::get<stage::Tokenize>(send.message).items) pieces.push_back(i.text);
  }
  EXPECT_EQ(pieces, (std::vector<std::string>{"one", "two three", "four five"}));
  ASSERT_EQ(out.replies.size(), 2u);
  std::map<std::string, protocol::Error> errors;
  for (size_t i = 0; i < out.replies.size(); ++i) {
    const protocol::Reply reply = reply_of(out, i);
    ASSERT_TRUE(reply.error);
    errors[reply.id] = *reply.error;
  }
  EXPECT_EQ(errors["sp-long"].code, protocol::ErrorCode::kInvalidArgument);
  EXPECT_EQ(errors["beta"].code, protocol::ErrorCode::kUnavailable);
  EXPECT_NE(errors["beta"].message.find("over the cap"), std::string::npos)
      << errors["beta"].message;
  EXPECT_EQ(configs_loaded, 3);
}

TEST(HttpRepository, CallsParseAndAnswerAsKServesExtension) {
  using model_control::Op;
  auto request = [](std::string_view path, std::string_view body) {
    return gateway::repository_request(path, body);
  };
  EXPECT_EQ(std::get<model_control::ControlRequest>(request("/v2/repository/index", "")).op,
            Op::kIndex);
  const auto load = std::get<model_control::ControlRequest>(
      request("/v2/repository/models/alpha/load", R"({"parameters": {"version": "2"}})"));
  EXPECT_EQ(load, (model_control::ControlRequest{Op::kLoad, "alpha", 2}));
  EXPECT_EQ(std::get<model_control::ControlRequest>(
                request("/v2/repository/models/alpha/unload", R"({"parameters": {}})")),
            (model_control::ControlRequest{Op::kUnload, "alpha", std::nullopt}));
  EXPECT_EQ(std::get<gateway::HttpAnswer>(request("/v2/repository/models/alpha/drop", "")).status,
            404);
  EXPECT_EQ(std::get<gateway::HttpAnswer>(request("/v2/repository/models/alpha/load", "[")).status,
            400);
  const auto bad_version = std::get<gateway::HttpAnswer>(
      request("/v2/repository/models/alpha/load", R"({"parameters": {"version": -1}})"));
  EXPECT_EQ(bad_version.status, 400);
  EXPECT_NE(bad_version.body.find("parameters.version"), std::string::npos);

  const model_control::ControlReply index{
      std::nullopt,
      {{"alpha", 1, model_control::State::kReady, ""},
       {"bad", 0, model_control::State::kUnavailable, "/r/bad/1: no config.json"}}};
  const auto listed = gateway::repository_answer({Op::kIndex, "", std::nullopt}, index);
  EXPECT_EQ(listed.status, 200);
  EXPECT_EQ(nlohmann::json::parse(listed.body),
            nlohmann::json::parse(R"([{"name":"alpha","version":"1","state":"READY","reason":""},
              {"name":"bad","version":"","state":"UNAVAILABLE","reason":"/r/bad/1: no config.json"}])"));
  const model_control::ControlReply refused{
      protocol::Error{protocol::ErrorCode::kNotFound, "model 'x' is not in the repository"}, {}};
  const auto answer = gateway::repository_answer(load, refused);
  EXPECT_EQ(answer.status, 404);
  EXPECT_EQ(nlohmann::json::parse(answer.body)["error"], "model 'x' is not in the repository");
  EXPECT_EQ(gateway::repository_answer(load, index).body, "{}");
}

TEST(HttpRepository, BearerTokensAreComparedWholeAndTokenFilesChecked) {
  const std::string token = "s3cret-token-0123456789";
  EXPECT_TRUE(gateway::bearer_token_matches(("Bearer " + token).c_str(), token));
  EXPECT_TRUE(gateway::bearer_token_matches(("bearer " + token).c_str(), token));  // any case
  EXPECT_FALSE(gateway::bearer_token_matches(nullptr, token));
  EXPECT_FALSE(gateway::bearer_token_matches(token.c_str(), token));  // no scheme
  EXPECT_FALSE(gateway::bearer_token_matches(("Basic " + token).c_str(), token));
  EXPECT_FALSE(gateway::bearer_token_matches(("Bearer " + token + "x").c_str(), token));
  EXPECT_FALSE(gateway::bearer_token_matches(("Bearer " + token.substr(1)).c_str(), token));
  EXPECT_FALSE(gateway::bearer_token_matches("Bearer ", token));

  const std::string path = ::testing::TempDir() + "token-" + std::to_string(::getpid());
  std::ofstream(path) << "  " << token << "  \nsecond line\n";
  EXPECT_EQ(gateway::read_repository_token(path), token);
  std::ofstream(path) << "short\n";
  EXPECT_THROW(gateway::read_repository_token(path), config::ConfigError);
  std::filesystem::remove(path);
  try {
    gateway::read_repository_token(path);
    ADD_FAILURE() << "a missing token file must stop the gateway";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gateway.repository_token_file"), std::string::npos);
  }
}

TEST(HttpRepository, AnIndexBeyondTheBoundIsAnsweredBoundedNotFailed) {
  model_control::ControlReply big;
  for (int i = 0; i < 5000; ++i)
    big.models.push_back(
        {"m" + std::to_string(i), 1, model_control::State::kReady, std::string(2000, 'r')});
  const auto decoded = model_control::decode_reply(model_control::encode(big));
  ASSERT_TRUE(decoded);  // the operation's answer arrives, whatever the repository holds
  EXPECT_EQ(decoded->models.size(), model_control::kMaxIndexEntries);
  EXPECT_EQ(decoded->more, 5000 - model_control::kMaxIndexEntries);
  EXPECT_EQ(decoded->models[0].reason.size(), model_control::kMaxReasonBytes);
  const auto listed =
      gateway::repository_answer({model_control::Op::kIndex, "", std::nullopt}, *decoded);
  EXPECT_EQ(listed.status, 200);
  const auto index = nlohmann::json::parse(listed.body);
  ASSERT_EQ(index.size(), model_control::kMaxIndexEntries + 1);
  EXPECT_NE(index.back()["reason"].get<std::string>().find("4000 more entries not shown"),
            std::string::npos);
}

TEST(HttpRepository, CallsDoNotWaitForOneAnother) {
  zmq::context_t context;
  transport::Socket supervisor(context, zmq::socket_type::router);
  supervisor.bind("inproc://test-supervisor");
  gateway::RepositoryClient client(context, "inproc://test-supervisor", std::chrono::seconds(20));
  std::mutex mutex;
  std::condition_variable answered;
  std::vector<std::string> order;
  auto note = [&](std::string what) {
    return [&, what](model_control::ControlReply) {
      std::lock_guard lock(mutex);
      order.push_back(what);
      answered.notify_all();
    };
  };
  using model_control::Op;
  ASSERT_TRUE(client.ask({Op::kLoad, "slow", std::nullopt}, note("load")));
  ASSERT_TRUE(client.ask({Op::kIndex, "", std::nullopt}, note("index")));
  // The supervisor holds the load (a slow, failing one) and answers the index at once.
  std::optional<transport::Frames> load;
  for (int received = 0; received < 2;) {
    auto frames = supervisor.recv(std::chrono::seconds(10));
    ASSERT_TRUE(frames);
    ++received;
    const auto request = model_control::decode_request(frames->back());
    if (std::get<model_control::ControlRequest>(request).op == Op::kLoad) {
      load = std::move(frames);
      continue;
    }
    frames->back() = model_control::encode(model_control::ControlReply{});
    supervisor.send(*frames);
  }
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(answered.wait_for(lock, std::chrono::seconds(10), [&] { return !order.empty(); }));
    EXPECT_EQ(order, std::vector<std::string>{"index"});  // while the load still waits
  }
  load->back() = model_control::encode(model_control::ControlReply{
      protocol::Error{protocol::ErrorCode::kUnavailable, "its replicas kept failing"}, {}});
  supervisor.send(*load);
  std::unique_lock lock(mutex);
  ASSERT_TRUE(answered.wait_for(lock, std::chrono::seconds(10), [&] { return order.size() == 2; }));
  EXPECT_EQ(order, (std::vector<std::string>{"index", "load"}));
}

}  // namespace
}  // namespace seqpipe
