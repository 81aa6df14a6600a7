// The option table: every row reaches GenerateParams through the msgpack codec under its wire
// name (which never changes), the engine's options through its engine column, and
// docs/PROTOCOL.md's option table is the table's.
#include "seqpipe/protocol/generate_options.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "option_samples.h"

namespace seqpipe::protocol {
namespace {

using nlohmann::json;

std::variant<Request, RejectedRequest> decode_json(const json& request) {
  const std::vector<uint8_t> bytes = json::to_msgpack(request);
  return decode_request(bytes, Limits{});
}

TEST(GenerateOptionsTest, TheWireNamesAreProtocolV1s) {
  // Renaming one breaks every client that sends it: this list only grows.
  const std::vector<std::string_view> v1 = {"max_new_tokens",
                                            "num_beams",
                                            "length_penalty",
                                            "min_new_tokens",
                                            "return_scores",
                                            "priority",
                                            "num_return_sequences",
                                            "repetition_penalty",
                                            "no_repeat_ngram_size",
                                            "do_sample",
                                            "temperature",
                                            "top_k",
                                            "top_p",
                                            "seed",
                                            "stop"};
  std::vector<std::string_view> names;
  for (const GenerateOption& option : generate_options()) names.push_back(option.name);
  EXPECT_EQ(names, v1);
}

TEST(GenerateOptionsTest, EveryRowIsComplete) {
  std::set<std::string_view> flags;
  for (const GenerateOption& option : generate_options()) {
    SCOPED_TRACE(option.name);
    EXPECT_EQ(find_generate_option(option.name), &option);
    EXPECT_TRUE(option.flag.starts_with("--"));
    EXPECT_TRUE(flags.insert(option.flag).second) << "flag used twice";
    EXPECT_FALSE(option.help.empty());
    EXPECT_FALSE(default_text(option).empty());
  }
  EXPECT_EQ(find_generate_option("num_beam"), nullptr);
}

TEST(GenerateOptionsTest, EveryRowTravelsUnderItsNameAndRoundTrips) {
  for (const GenerateOption& option : generate_options()) {
    SCOPED_TRACE(option.name);
    json params = testing::option_companions(option);
    params[std::string(option.name)] = testing::option_sample(option);
    const auto decoded = decode_json({{"v", 1}, {"text", "a"}, {"params", params}});
    ASSERT_TRUE(std::holds_alternative<Request>(decoded))
        << std::get<RejectedRequest>(decoded).error.message;
    const Request& request = std::get<Request>(decoded);
    const GenerateParams expected = testing::with_sample(GenerateParams{}, option);
    EXPECT_EQ(value_text(option, request.params), value_text(option, expected));
    EXPECT_FALSE(is_default(option, request.params));
    // And back: the encoder writes it (it is not its default) and the decoder reads it again.
    const std::string bytes = encode_request(request);
    const auto again = decode_request(
        std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), Limits{});
    ASSERT_TRUE(std::holds_alternative<Request>(again));
    EXPECT_EQ(std::get<Request>(again), request);
  }
}

TEST(GenerateOptionsTest, ARangeErrorNamesTheOptionAndItsRange) {
  const auto rejected = [](const json& params) {
    const auto decoded = decode_json({{"v", 1}, {"text", "a"}, {"params", params}});
    EXPECT_TRUE(std::holds_alternative<RejectedRequest>(decoded));
    return std::get<RejectedRequest>(decoded).error.message;
  };
  EXPECT_EQ(rejected({{"top_p", 1.5}}), "params.top_p must be in (0, 1], got float 1.5");
  EXPECT_EQ(rejected({{"temperature", 0}}), "params.temperature must be > 0, got 0");
  EXPECT_EQ(rejected({{"num_beams", 9}}), "params.num_beams must be an integer in [1, 8], got 9");
  EXPECT_EQ(range_text(*find_generate_option("num_beams")), "[1, max_beams]");
  Limits limits;
  limits.max_beams = 4;
  EXPECT_EQ(range_text(*find_generate_option("num_beams"), &limits), "[1, 4]");
}

TEST(GenerateOptionsTest, TheSearchOptionsAreTheRowsOfSearchOptionsMembers) {
  // A row is a search option exactly when its sample changes the SearchOptions part of the
  // params, the part the engine takes as it is.
  int search_rows = 0;
  for (const GenerateOption& option : generate_options()) {
    SCOPED_TRACE(option.name);
    const GenerateParams params = testing::with_sample(GenerateParams{}, option);
    const bool changes_search =
        static_cast<const generation::SearchOptions&>(params) != generation::SearchOptions{};
    EXPECT_EQ(is_search_option(option), changes_search);
    search_rows += is_search_option(option);
  }
  EXPECT_EQ(search_rows, 13);  // every option but priority and stop
  EXPECT_FALSE(is_search_option(*find_generate_option("priority")));
  EXPECT_FALSE(is_search_option(*find_generate_option("stop")));
}

TEST(GenerateOptionsTest, TheProtocolDocsTableIsTheTables) {
  const std::string path = std::string(SEQPIPE_SOURCE_DIR) + "/docs/PROTOCOL.md";
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  std::string doc = text.str();
  const std::string begin = "<!-- options table: begin -->\n", end = "<!-- options table: end -->";
  const size_t from = doc.find(begin), to = doc.find(end);
  ASSERT_NE(from, std::string::npos) << path << " has no " << begin;
  ASSERT_NE(to, std::string::npos) << path << " has no " << end;
  const std::string section = doc.substr(from + begin.size(), to - from - begin.size());
  if (std::getenv("SEQPIPE_UPDATE_DOCS") != nullptr && section != options_markdown()) {
    doc.replace(from + begin.size(), to - from - begin.size(), options_markdown());
    std::ofstream(path) << doc;
    return;
  }
  EXPECT_EQ(section, options_markdown())
      << "docs/PROTOCOL.md's option table differs from the option table "
         "(common/protocol/src/generate_options.cc); run this test with SEQPIPE_UPDATE_DOCS=1";
}

// The Python client takes its options from clients/python/seqpipe_options.py, the table written
// out; SEQPIPE_UPDATE_DOCS=1 rewrites it (tests/clients/python_client_test.py sends every row).
TEST(GenerateOptionsTest, ThePythonClientsTableIsTheTables) {
  const std::string path = std::string(SEQPIPE_SOURCE_DIR) + "/clients/python/seqpipe_options.py";
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  if (std::getenv("SEQPIPE_UPDATE_DOCS") != nullptr && text.str() != options_python()) {
    std::ofstream(path) << options_python();
    return;
  }
  EXPECT_EQ(text.str(), options_python())
      << path << " differs from the option table (common/protocol/src/generate_options.cc); "
      << "run this test with SEQPIPE_UPDATE_DOCS=1";
}

}  // namespace
}  // namespace seqpipe::protocol
