// Scanning a model repository: versions found, the flat layout as version 1, every bad entry
// reported with its path and reason while the good ones stay listed.
#include "seqpipe/config/model_repository.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../test_util.h"
#include "seqpipe/config/config.h"

namespace seqpipe::config {
namespace {

namespace fs = std::filesystem;

class ModelRepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("seqpipe-repo-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  // A complete model version directory (the scan reads the weights file's header alone).
  fs::path model(const fs::path& dir, bool complete = true) {
    test_util::write_model_files(dir);
    if (!complete) fs::remove(dir / "model.safetensors");
    return dir;
  }
  fs::path root_;
};

TEST_F(ModelRepositoryTest, ListsModelsAndVersionsInOrder) {
  model(root_ / "speller" / "2");
  model(root_ / "speller" / "1");
  model(root_ / "speller" / "10");
  model(root_ / "rewriter" / "3");
  const ModelRepository repo = scan_repository(root_.string());
  ASSERT_EQ(repo.models.size(), 4u);
  EXPECT_TRUE(repo.bad.empty());
  EXPECT_EQ(repo.models[0], (ModelVersion{"rewriter", 3, (root_ / "rewriter" / "3").string()}));
  EXPECT_EQ(repo.models[1].version, 1);
  EXPECT_EQ(repo.models[2].version, 2);
  EXPECT_EQ(repo.models[3].version, 10);  // numerically, not as text
  EXPECT_EQ(repo.models[3].name, "speller");
}

// A version whose weights file is not whole (a copy in progress or stalled) cannot be served; its
// reason says what the header promised.
TEST_F(ModelRepositoryTest, AVersionWithWeightsNotWholeIsABadEntry) {
  model(root_ / "speller" / "1");
  const fs::path weights = model(root_ / "speller" / "2") / "model.safetensors";
  // A header promising 16 bytes of tensor data, of which 8 are there.
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  std::ofstream(weights, std::ios::binary) << bytes << header << std::string(8, '\0');
  fs::resize_file(root_ / "speller" / "1" / "model.safetensors", 5);  // not even the length
  ModelRepository repo = scan_repository(root_.string());
  EXPECT_TRUE(repo.models.empty());
  ASSERT_EQ(repo.bad.size(), 2u);
  EXPECT_EQ(repo.bad[0].path, (root_ / "speller" / "1").string());
  EXPECT_NE(repo.bad[0].reason.find("model.safetensors is incomplete (5 bytes"), std::string::npos)
      << repo.bad[0].reason;
  EXPECT_NE(repo.bad[1].reason.find("its header says " + std::to_string(8 + header.size() + 16)),
            std::string::npos)
      << repo.bad[1].reason;
  std::ofstream(weights, std::ios::app) << std::string(8, '\0');  // the rest arrives
  repo = scan_repository(root_.string());
  ASSERT_EQ(repo.models.size(), 1u);
  EXPECT_EQ(repo.models[0].version, 2);
}

TEST_F(ModelRepositoryTest, FlatModelDirectoryIsVersionOne) {
  model(root_ / "speller-t5");
  const ModelRepository repo = scan_repository(root_.string());
  ASSERT_EQ(repo.models.size(), 1u);
  EXPECT_EQ(repo.models[0], (ModelVersion{"speller-t5", 1, (root_ / "speller-t5").string()}));
}

TEST_F(ModelRepositoryTest, BadEntriesNameTheirPathAndReasonAndSpareTheOthers) {
  model(root_ / "good" / "1");
  model(root_ / "broken" / "1", /*complete=*/false);
  model(root_ / "broken" / "2");
  model(root_ / "odd" / "latest");
  model(root_ / "odd" / "01");
  fs::create_directories(root_ / "empty");
  std::ofstream(root_ / "README.md") << "not a model";  // files beside the models are left alone
  const ModelRepository repo = scan_repository(root_.string());
  ASSERT_EQ(repo.models.size(), 2u);
  EXPECT_EQ(repo.models[0].name, "broken");
  EXPECT_EQ(repo.models[0].version, 2);
  EXPECT_EQ(repo.models[1].name, "good");
  // A model whose every version is bad has nothing to serve: it is listed too.
  ASSERT_EQ(repo.bad.size(), 5u);
  EXPECT_EQ(repo.bad[0],
            (BadEntry{(root_ / "broken" / "1").string(), "missing model.safetensors"}));
  EXPECT_EQ(repo.bad[1].path, (root_ / "empty").string());
  EXPECT_NE(repo.bad[1].reason.find("no version directory"), std::string::npos);
  EXPECT_EQ(repo.bad[2].path, (root_ / "odd").string());
  EXPECT_EQ(repo.bad[3].path, (root_ / "odd" / "01").string());
  EXPECT_EQ(repo.bad[4].path, (root_ / "odd" / "latest").string());
  EXPECT_NE(repo.bad[4].reason.find("not a version number"), std::string::npos);
}

TEST_F(ModelRepositoryTest, LinksOutOfTheRepositoryAreRefusedAndSayNothingOfTheirTarget) {
  const fs::path outside = root_.string() + "-outside";
  fs::remove_all(outside);
  model(outside / "secret" / "1");
  model(root_ / "real" / "1");
  model(root_ / "mixed" / "1");
  fs::create_directory_symlink(root_ / "real", root_ / "alias");                 // inside: served
  fs::create_directory_symlink(outside / "secret", root_ / "stolen");            // a model dir
  fs::create_directory_symlink(outside / "secret" / "1", root_ / "real" / "2");  // a version
  fs::remove(root_ / "mixed" / "1" / "model.safetensors");
  fs::create_symlink(outside / "secret" / "1" / "model.safetensors",
                     root_ / "mixed" / "1" / "model.safetensors");  // one file
  const ModelRepository repo = scan_repository(root_.string());
  fs::remove_all(outside);
  ASSERT_EQ(repo.models.size(), 2u);
  EXPECT_EQ(repo.models[0].name, "alias");
  EXPECT_EQ(repo.models[1], (ModelVersion{"real", 1, (root_ / "real" / "1").string()}));
  ASSERT_EQ(repo.bad.size(), 4u);  // alias/2 is real/2 seen through the link
  for (const BadEntry& bad : repo.bad) {
    EXPECT_NE(bad.reason.find("refused: a symbolic link out of the repository"), std::string::npos)
        << bad.path << ": " << bad.reason;
    EXPECT_EQ(bad.reason.find(outside.string()), std::string::npos) << bad.reason;
    EXPECT_EQ(bad.path.find(outside.string()), std::string::npos) << bad.path;
  }
  EXPECT_EQ(repo.bad[2].path, (root_ / "real" / "2").string());
  EXPECT_EQ(repo.bad[3].path, (root_ / "stolen").string());
}

TEST_F(ModelRepositoryTest, MissingRepositoryIsOneBadEntry) {
  const ModelRepository repo = scan_repository((root_ / "nowhere").string());
  EXPECT_TRUE(repo.models.empty());
  ASSERT_EQ(repo.bad.size(), 1u);
  EXPECT_EQ(repo.bad[0].reason, "not a directory");
}

TEST_F(ModelRepositoryTest, ModelNames) {
  EXPECT_TRUE(valid_model_name("speller-t5"));
  EXPECT_TRUE(valid_model_name("v1.2_x"));
  EXPECT_FALSE(valid_model_name(""));
  EXPECT_FALSE(valid_model_name(".hidden"));
  EXPECT_FALSE(valid_model_name("a/b"));
  EXPECT_FALSE(valid_model_name(std::string(129, 'a')));
  EXPECT_EQ(model_key("speller", 2), "speller/2");
}

// A version's config as its replicas load it: its seqpipe.yaml under the pipeline's file and
// --set, whatever model.dir those name.
TEST_F(ModelRepositoryTest, AVersionsConfigLayersItsOwnFileUnderThePipelines) {
  const fs::path v1 = model(root_ / "speller" / "1"), v2 = model(root_ / "speller" / "2");
  std::ofstream(v1 / "seqpipe.yaml")
      << "gateway:\n  split_words: 8\ndecoder:\n  max_new_tokens: 40\n";
  std::ofstream(v2 / "seqpipe.yaml") << "gateway:\n  split_words: 3\n";
  std::ofstream(root_ / "pipeline.yaml")
      << "model:\n  dir: " << v2.string() << "\ndecoder:\n  max_new_tokens: 20\n";
  LoadedConfig pipeline;
  pipeline.path = (root_ / "pipeline.yaml").string();
  pipeline.overrides = {"runtime_dir=/run/sp", "model.repository=" + root_.string()};
  const PipelineConfig c = load_model_version_config(pipeline, {"speller", 1, v1.string()});
  EXPECT_EQ(c.model.dir, v1.string());
  EXPECT_EQ(served_model_key(c.model), "speller/1");
  EXPECT_EQ(c.gateway.split_words, 8u);     // v1's file, not the pipeline's model.dir's
  EXPECT_EQ(c.decoder.max_new_tokens, 20);  // the pipeline's file over the version's
  pipeline.overrides.push_back("gateway.split_words=0");
  EXPECT_EQ(load_model_version_config(pipeline, {"speller", 1, v1.string()}).gateway.split_words,
            0u);  // --set over both
  std::ofstream(v1 / "seqpipe.yaml") << "batcher:\n  replicas: 2\n";
  EXPECT_THROW(load_model_version_config(pipeline, {"speller", 1, v1.string()}), ConfigError);
}

TEST(ModelCatalogTest, ResolvesNamesAndVersions) {
  const ModelCatalog catalog(
      {{"speller", 1, "r/speller/1"}, {"speller", 2, "r/speller/2"}, {"rewriter", 5, "r/rw/5"}},
      "speller");
  EXPECT_EQ(catalog.default_name(), "speller");
  EXPECT_EQ(catalog.default_key(), "speller/2");  // the highest version
  EXPECT_EQ(std::get<std::string>(catalog.resolve(std::nullopt, std::nullopt)), "speller/2");
  EXPECT_EQ(std::get<std::string>(catalog.resolve("speller", 1u)), "speller/1");
  EXPECT_EQ(std::get<std::string>(catalog.resolve("rewriter", std::nullopt)), "rewriter/5");
  EXPECT_EQ(catalog.names(), (std::vector<std::string>{"rewriter", "speller"}));
  const auto unknown = catalog.resolve("nope", std::nullopt);
  ASSERT_TRUE(std::holds_alternative<protocol::Error>(unknown));
  EXPECT_EQ(std::get<protocol::Error>(unknown).code, protocol::ErrorCode::kNotFound);
  EXPECT_NE(std::get<protocol::Error>(unknown).message.find("'nope'"), std::string::npos);
  EXPECT_NE(std::get<protocol::Error>(unknown).message.find("speller/2"), std::string::npos);
  const auto no_version = catalog.resolve("speller", 3u);
  ASSERT_TRUE(std::holds_alternative<protocol::Error>(no_version));
  EXPECT_NE(std::get<protocol::Error>(no_version).message.find("version 3"), std::string::npos);
  // find() is the same lookup, answering the version itself (its name and number).
  EXPECT_EQ(std::get<ModelVersion>(catalog.find("speller", std::nullopt)),
            (ModelVersion{"speller", 2, "r/speller/2"}));
  EXPECT_EQ(std::get<protocol::Error>(catalog.find("speller", 3u)).message,
            std::get<protocol::Error>(no_version).message);
  EXPECT_EQ(catalog.key_of({"rewriter", 5, "r/rw/5"}), "rewriter/5");
  EXPECT_EQ(catalog.versions("speller"), (std::vector<int>{1, 2}));
  EXPECT_TRUE(catalog.versions("nope").empty());
  EXPECT_FALSE(catalog.single());
}

TEST(ModelCatalogTest, DefaultIsTheFirstNameWhenThePreferredIsNotServed) {
  const ModelCatalog catalog({{"b", 1, "b"}, {"a", 1, "a"}}, "");
  EXPECT_EQ(catalog.default_key(), "a/1");
}

TEST_F(ModelRepositoryTest, EachNamesNewestVersionIsServedUnlessToldOtherwise) {
  for (const char* v : {"1", "2", "12"}) model(root_ / "speller" / v);
  model(root_ / "other" / "4");
  const auto all = scan_repository(root_.string()).models;
  ASSERT_EQ(all.size(), 4u);
  auto keys = [](const std::vector<ModelVersion>& models) {
    std::vector<std::string> out;
    for (const auto& m : models) out.push_back(model_key(m.name, m.version));
    return out;
  };
  EXPECT_EQ(keys(newest_versions(all, 1)), (std::vector<std::string>{"other/4", "speller/12"}));
  EXPECT_EQ(keys(newest_versions(all, 2)),
            (std::vector<std::string>{"other/4", "speller/2", "speller/12"}));
  EXPECT_EQ(keys(newest_versions(all, 0)), keys(all));
  PipelineConfig config;  // the default: the newest only, as Triton's version_policy latest: 1
  config.model.repository = root_.string();
  EXPECT_EQ(keys(ModelCatalog::of(config).models()),
            (std::vector<std::string>{"other/4", "speller/12"}));
  config.model.repository_versions = 0;
  EXPECT_EQ(ModelCatalog::of(config).models().size(), 4u);
}

TEST(ModelCatalogTest, PipelineWithoutRepositoryServesItsModelDirUnderItsName) {
  PipelineConfig config;
  config.model.dir = "models/speller-t5/";
  const ModelCatalog catalog = ModelCatalog::of(config);
  // Its one model's key is "" on both sides, whatever the directory is called on each machine.
  EXPECT_EQ(catalog.default_key(), "");
  EXPECT_EQ(served_model_key(config.model), "");
  EXPECT_EQ(catalog.default_name(), "speller-t5");
  EXPECT_EQ(std::get<std::string>(catalog.resolve("speller-t5", 1u)), "");
  EXPECT_TRUE(std::holds_alternative<protocol::Error>(catalog.resolve("other", std::nullopt)));
  EXPECT_TRUE(catalog.single());
  EXPECT_EQ(catalog.key_of(std::get<ModelVersion>(catalog.find("speller-t5", 1u))), "");
  config.model.name = "speller";
  config.model.version = 3;
  EXPECT_EQ(ModelCatalog::of(config).default_name(), "speller");
  EXPECT_TRUE(
      std::holds_alternative<protocol::Error>(ModelCatalog::of(config).resolve("speller", 1u)));
  config.model.repository = "/nowhere";  // a replica started from a repository names its version
  EXPECT_EQ(served_model_key(config.model), "speller/3");
}

}  // namespace
}  // namespace seqpipe::config
