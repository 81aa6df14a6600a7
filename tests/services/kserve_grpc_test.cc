// KServe v2 over gRPC's translations (pure): a ModelInferRequest becomes the same protocol
// request HTTP's KServe body does, the call's deadline becomes timeout_ms, replies and errors
// become the protocol's messages and gRPC statuses. grpc_test.py runs the server end to end.
#include "gateway/kserve_grpc.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../common/protocol/option_samples.h"
#include "gateway/json_request.h"

namespace seqpipe::gateway {
namespace {

using nlohmann::json;

const ResponseModel kM{"m", "1"};

inference::ModelInferRequest infer(std::initializer_list<std::string> texts) {
  inference::ModelInferRequest r;
  r.set_model_name("m");
  r.set_id("mine");
  auto* input = r.add_inputs();
  input->set_name("text");
  input->set_datatype("BYTES");
  input->add_shape(static_cast<int64_t>(texts.size()));
  for (const auto& t : texts) input->mutable_contents()->add_bytes_contents(t);
  return r;
}

json gateway_json(const std::variant<HttpRequest, grpc::Status>& out) {
  EXPECT_TRUE(std::holds_alternative<HttpRequest>(out))
      << std::get<grpc::Status>(out).error_message();
  return std::get<HttpRequest>(out).fields;
}

TEST(KserveGrpcTest, InferBecomesTheSameRequestAsHttpKserve) {
  auto r = infer({"teh speling", "hello"});
  (*r.mutable_parameters())["max_new_tokens"].set_int64_param(8);
  (*r.mutable_parameters())["length_penalty"].set_double_param(0.5);
  (*r.mutable_parameters())["return_scores"].set_bool_param(true);
  const auto out = kserve_grpc_request(r, "grpc-3", std::nullopt);
  const json j = gateway_json(out);
  EXPECT_EQ(j["id"], "grpc-3");
  EXPECT_EQ(j["texts"], json({"teh speling", "hello"}));
  EXPECT_EQ(j["params"]["max_new_tokens"], 8);
  EXPECT_EQ(j["params"]["length_penalty"], 0.5);
  EXPECT_EQ(j["params"]["return_scores"], true);
  EXPECT_FALSE(j.contains("timeout_ms"));
  EXPECT_EQ(std::get<HttpRequest>(out).client_id, "mine");

  const auto http = kserve_infer_request(
      R"({"id": "mine", "inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
          "data": ["teh speling", "hello"]}], "parameters": {"max_new_tokens": 8,
          "length_penalty": 0.5, "return_scores": true}})",
      "grpc-3", "m");  // as POST /v2/models/m/infer
  EXPECT_EQ(std::get<HttpRequest>(http).fields, j);
}

// model_name and model_version become the protocol request's model and version, which the
// gateway resolves as it does HTTP's KServe paths'.
TEST(KserveGrpcTest, ModelNameAndVersionBecomeTheRequestsModel) {
  auto r = infer({"hello"});
  r.set_model_name("beta");
  (*r.mutable_parameters())["model"].set_string_param("alpha");  // model_name wins
  json j = gateway_json(kserve_grpc_request(r, "g", std::nullopt));
  EXPECT_EQ(j["model"], "beta");
  EXPECT_FALSE(j.contains("version"));  // the highest served
  EXPECT_FALSE(j.contains("params"));
  r.set_model_version("2");
  j = gateway_json(kserve_grpc_request(r, "g", std::nullopt));
  EXPECT_EQ(j["version"], 2);
  const auto http = kserve_infer_request(
      R"({"id": "mine", "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
          "data": ["hello"]}]})",
      "g", "beta", 2u);  // POST /v2/models/beta/versions/2/infer
  EXPECT_EQ(std::get<HttpRequest>(http).fields, j);
  for (const char* bad : {"x", "0", "-1", "2.0", "1000001"}) {
    r.set_model_version(bad);
    const auto out = kserve_grpc_request(r, "g", std::nullopt);
    ASSERT_TRUE(std::holds_alternative<grpc::Status>(out)) << bad;
    EXPECT_EQ(std::get<grpc::Status>(out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(std::get<grpc::Status>(out).error_message(),
              "model_version must be empty (the highest served) or a version number, 1 to 1000000");
  }
}

grpc::Status status_of(const std::variant<config::ModelVersion, grpc::Status>& found) {
  EXPECT_TRUE(std::holds_alternative<grpc::Status>(found));
  return std::holds_alternative<grpc::Status>(found) ? std::get<grpc::Status>(found)
                                                     : grpc::Status::OK;
}

// A call's model resolves in the catalog every door resolves by, with its messages.
TEST(KserveGrpcTest, AModelResolvesInTheCatalog) {
  const config::ModelCatalog repo({{"alpha", 1, "a"}, {"beta", 1, "b1"}, {"beta", 2, "b2"}},
                                  "alpha");
  using V = config::ModelVersion;
  EXPECT_EQ(std::get<V>(kserve_grpc_model(repo, "beta", "")), (V{"beta", 2, "b2"}));
  EXPECT_EQ(std::get<V>(kserve_grpc_model(repo, "beta", "1")), (V{"beta", 1, "b1"}));
  EXPECT_EQ(std::get<V>(kserve_grpc_model(repo, "", "")), (V{"alpha", 1, "a"}));  // the default
  const auto catalogs_message = [&](const std::string& name, std::optional<uint32_t> version) {
    return "not_found: " + std::get<protocol::Error>(repo.find(name, version)).message;
  };
  const grpc::Status gamma = status_of(kserve_grpc_model(repo, "gamma", ""));
  EXPECT_EQ(gamma.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(gamma.error_message(), catalogs_message("gamma", std::nullopt));
  EXPECT_NE(gamma.error_message().find("alpha/1, beta/1, beta/2"), std::string::npos);
  const grpc::Status three = status_of(kserve_grpc_model(repo, "beta", "3"));
  EXPECT_EQ(three.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(three.error_message(), catalogs_message("beta", 3u));
  EXPECT_EQ(status_of(kserve_grpc_model(repo, "beta", "two")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status_of(kserve_grpc_model(repo, std::string(129, 'a'), "")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  // Without a repository: its one model by its name only, as ever; its version is the catalog's.
  const config::ModelCatalog single({{"m", 1, "dir"}}, "m", /*single=*/true);
  EXPECT_EQ(std::get<V>(kserve_grpc_model(single, "m", "")), (V{"m", 1, "dir"}));
  EXPECT_EQ(std::get<V>(kserve_grpc_model(single, "m", "1")), (V{"m", 1, "dir"}));
  EXPECT_EQ(status_of(kserve_grpc_model(single, "nope", "")).error_message(),
            check_model("nope", "m").error_message());
  EXPECT_EQ(status_of(kserve_grpc_model(single, "", "")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status_of(kserve_grpc_model(single, "m", "2")).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(KserveGrpcTest, RawInputContentsAreLengthPrefixedElements) {
  auto r = infer({});
  r.mutable_inputs(0)->set_shape(0, 2);
  r.add_raw_input_contents(std::string("\x02\0\0\0hi\x03\0\0\0you", 13));
  EXPECT_EQ(gateway_json(kserve_grpc_request(r, "g", std::nullopt))["texts"], json({"hi", "you"}));
  r.set_raw_input_contents(0, std::string("\x09\0\0\0hi", 6));  // claims more than is there
  const auto bad = kserve_grpc_request(r, "g", std::nullopt);
  ASSERT_TRUE(std::holds_alternative<grpc::Status>(bad));
  EXPECT_EQ(std::get<grpc::Status>(bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(KserveGrpcTest, TheDeadlineBecomesTimeoutMsUnlessTheRequestAsksLess) {
  auto r = infer({"hello"});
  EXPECT_EQ(gateway_json(kserve_grpc_request(r, "g", 250u))["timeout_ms"], 250);
  (*r.mutable_parameters())["timeout_ms"].set_int64_param(100);
  EXPECT_EQ(gateway_json(kserve_grpc_request(r, "g", 250u))["timeout_ms"], 100);
  (*r.mutable_parameters())["timeout_ms"].set_int64_param(900);
  EXPECT_EQ(gateway_json(kserve_grpc_request(r, "g", 250u))["timeout_ms"], 250);
}

TEST(KserveGrpcTest, BadTensorsAreInvalidArgumentWithTheMappingsMessage) {
  auto r = infer({"hello"});
  r.mutable_inputs(0)->set_datatype("FP32");
  const auto out = kserve_grpc_request(r, "g", std::nullopt);
  ASSERT_TRUE(std::holds_alternative<grpc::Status>(out));
  EXPECT_EQ(std::get<grpc::Status>(out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(std::get<grpc::Status>(out).error_message(),
            "inputs[0].datatype must be \"BYTES\" (the texts)");
  r = infer({"hello"});
  (*r.mutable_parameters())["max_new_tokens"];  // no value chosen
  EXPECT_EQ(std::get<grpc::Status>(kserve_grpc_request(r, "g", std::nullopt)).error_message(),
            "parameters['max_new_tokens'] holds no value");
  EXPECT_EQ(check_model("x", "m").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(check_model("m", "m").ok());
}

TEST(KserveGrpcTest, RepliesBecomeTensorsAndErrorsStatuses) {
  protocol::Reply ok;
  ok.id = "grpc-3";
  ok.batch_form = true;
  ok.texts = {"the spelling", "hello"};
  ok.scores = {-0.5f, -0.25f};
  auto out = kserve_grpc_reply(protocol::encode_reply(ok), "mine", kM);
  ASSERT_TRUE(std::holds_alternative<inference::ModelInferResponse>(out));
  const auto& response = std::get<inference::ModelInferResponse>(out);
  EXPECT_EQ(response.id(), "mine");
  EXPECT_EQ(response.model_name(), "m");
  EXPECT_EQ(response.model_version(), "1");
  EXPECT_EQ(std::get<inference::ModelInferResponse>(
                kserve_grpc_reply(protocol::encode_reply(ok), "mine", {"beta", "2"}))
                .model_version(),
            "2");
  ASSERT_EQ(response.outputs_size(), 2);
  EXPECT_EQ(response.outputs(0).contents().bytes_contents(1), "hello");
  EXPECT_EQ(response.outputs(0).shape(0), 2);
  EXPECT_EQ(response.outputs(1).datatype(), "FP32");
  EXPECT_EQ(response.outputs(1).contents().fp32_contents(0), -0.5f);
  EXPECT_TRUE(response.parameters().contains("timings_us.total"));

  const auto error =
      kserve_grpc_reply(protocol::encode_reply(protocol::error_reply(
                            "grpc-3", {protocol::ErrorCode::kTooLong, "texts[0] too long"})),
                        "mine", kM);
  ASSERT_TRUE(std::holds_alternative<grpc::Status>(error));
  EXPECT_EQ(std::get<grpc::Status>(error).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(std::get<grpc::Status>(error).error_message(), "too_long: texts[0] too long");
  EXPECT_EQ(grpc_code(protocol::ErrorCode::kDeadlineExceeded), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(grpc_code(protocol::ErrorCode::kCancelled), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(grpc_code(protocol::ErrorCode::kOverloaded), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

// ModelStreamInfer: one text goes as a streamed request, several as one; each partial reply is a
// response of its piece, the final one's text is what the partials left (nothing) and it alone
// says triton_final_response; an error is error_message with the request's id.
TEST(KserveGrpcTest, StreamRequestsAndTheirResponses) {
  const json one = gateway_json(kserve_grpc_request(infer({"hello"}), "g", std::nullopt, true));
  EXPECT_EQ(one["text"], "hello");
  EXPECT_EQ(one["stream"], true);
  EXPECT_FALSE(one.contains("texts"));
  const json two =
      gateway_json(kserve_grpc_request(infer({"a", "b"}), "g", std::nullopt, /*stream=*/true));
  EXPECT_EQ(two["texts"], json({"a", "b"}));
  EXPECT_FALSE(two.contains("stream"));

  protocol::Reply partial;
  partial.id = "g";
  partial.partial = true;
  partial.texts = {"the "};
  const auto piece = kserve_grpc_stream_reply(protocol::encode_reply(partial), "mine", kM, true);
  EXPECT_FALSE(piece.final);
  EXPECT_EQ(piece.response.error_message(), "");
  EXPECT_EQ(piece.response.infer_response().id(), "mine");
  EXPECT_EQ(piece.response.infer_response().outputs(0).contents().bytes_contents(0), "the ");
  EXPECT_FALSE(piece.response.infer_response().parameters().at(kFinalResponse).bool_param());

  protocol::Reply ok;
  ok.id = "g";
  ok.texts = {"the spelling"};
  const auto last = kserve_grpc_stream_reply(protocol::encode_reply(ok), "mine", kM, true);
  EXPECT_TRUE(last.final);
  EXPECT_EQ(last.response.infer_response().outputs(0).contents().bytes_contents(0), "");
  EXPECT_TRUE(last.response.infer_response().parameters().at(kFinalResponse).bool_param());
  EXPECT_TRUE(last.response.infer_response().parameters().contains("timings_us.total"));
  const auto whole = kserve_grpc_stream_reply(protocol::encode_reply(ok), "mine", kM, false);
  EXPECT_EQ(whole.response.infer_response().outputs(0).contents().bytes_contents(0),
            "the spelling");

  const auto error = kserve_grpc_stream_reply(
      protocol::encode_reply(protocol::error_reply(
          "g", {protocol::ErrorCode::kInvalidArgument, "params.num_beams must be 1"})),
      "mine", kM, true);
  EXPECT_TRUE(error.final);
  EXPECT_EQ(error.response.error_message(), "invalid_argument: params.num_beams must be 1");
  EXPECT_EQ(error.response.infer_response().id(), "mine");
}

TEST(KserveGrpcTest, MetadataIsHttpKservesMetadata) {
  const config::ModelCatalog catalog({{"m", 1, "m/1"}, {"m", 2, "m/2"}, {"n", 1, "n"}}, "m");
  const auto m = kserve_grpc_metadata(catalog, "m", std::nullopt);
  EXPECT_EQ(m.name(), "m");
  EXPECT_EQ(std::vector<std::string>(m.versions().begin(), m.versions().end()),
            (std::vector<std::string>{"1", "2"}));  // every version served
  const auto one = kserve_grpc_metadata(catalog, "m", 1u);
  EXPECT_EQ(std::vector<std::string>(one.versions().begin(), one.versions().end()),
            std::vector<std::string>{"1"});  // the version named
  ASSERT_EQ(m.inputs_size(), 1);
  EXPECT_EQ(m.inputs(0).datatype(), "BYTES");
  EXPECT_EQ(m.inputs(0).shape(0), -1);
  EXPECT_EQ(m.outputs_size(), 2);
}

// Every row of the option table as an InferParameter of its type (a list option as one
// string_param) reaches the protocol request.
TEST(KserveGrpcTest, EveryGenerationOptionIsAParameter) {
  for (const protocol::GenerateOption& option : protocol::generate_options()) {
    SCOPED_TRACE(option.name);
    auto r = infer({"a"});
    auto& parameters = *r.mutable_parameters();
    const json sample = testing::option_sample(option);
    if (option.name == "num_return_sequences") parameters["num_beams"].set_int64_param(2);
    auto& p = parameters[std::string(option.name)];
    if (sample.is_boolean()) {
      p.set_bool_param(sample.get<bool>());
    } else if (sample.is_array()) {
      p.set_string_param(sample[0].get<std::string>());
    } else if (sample.is_number_float()) {
      p.set_double_param(sample.get<double>());
    } else {
      p.set_int64_param(sample.get<int64_t>());
    }
    const auto decoded =
        typed_request(std::get<HttpRequest>(kserve_grpc_request(r, "g", std::nullopt)),
                      *SharedCatalog::only("speller"));
    ASSERT_TRUE(std::holds_alternative<protocol::Request>(decoded))
        << std::get<protocol::RejectedRequest>(decoded).error.message;
    const auto& params = std::get<protocol::Request>(decoded).params;
    EXPECT_EQ(protocol::value_text(option, params),
              protocol::value_text(option, testing::with_sample({}, option)));
  }
}

}  // namespace
}  // namespace seqpipe::gateway
