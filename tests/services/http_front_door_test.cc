// The gateway's HTTP front door: the JSON translations (pure), then the server over real HTTP
// against a test gateway (a ROUTER on inproc answering protocol requests): routes, HTTP status per
// error code, KServe v2 bodies as the spec shows them, bad bodies answered and the server kept up.
#include "gateway/http_front_door.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "gateway/json_request.h"
#include "test_gateway.h"

namespace seqpipe::gateway {
namespace {

using nlohmann::json;

json request_json(const HttpRequest& r) {
  return r.fields;
}

TEST(HttpTranslationTest, GenerateBodyBecomesTheProtocolRequestWithTheInternalId) {
  auto out = generate_request(
      R"({"id": "mine", "text": "teh speling", "params": {"max_new_tokens": 8}, "timeout_ms": 900})",
      "http-7");
  ASSERT_TRUE(std::holds_alternative<HttpRequest>(out));
  const auto& r = std::get<HttpRequest>(out);
  EXPECT_EQ(r.client_id, "mine");
  EXPECT_EQ(r.timeout_ms, 900u);
  const json j = request_json(r);
  EXPECT_EQ(j["id"], "http-7");
  EXPECT_EQ(j["v"], 1);
  EXPECT_EQ(j["text"], "teh speling");
  EXPECT_EQ(j["params"]["max_new_tokens"], 8);
  // And the protocol's validator accepts it as the msgpack path would.
  auto decoded = typed_request(r, *SharedCatalog::only("speller"));
  ASSERT_TRUE(std::holds_alternative<protocol::Request>(decoded));
  EXPECT_EQ(std::get<protocol::Request>(decoded).params.max_new_tokens, 8);
}

TEST(HttpTranslationTest, ABodyThatIsNotAnObjectIsAnInvalidArgumentAnswer) {
  for (const char* body : {"", "{", "[1, 2]", "\"text\"", "{\"id\": 5, \"text\": \"a\"}"}) {
    auto out = generate_request(body, "http-1");
    ASSERT_TRUE(std::holds_alternative<HttpAnswer>(out)) << body;
    const auto& a = std::get<HttpAnswer>(out);
    EXPECT_EQ(a.status, 400) << body;
    const json j = json::parse(a.body);
    EXPECT_EQ(j["status"], "error");
    EXPECT_EQ(j["error"]["code"], "invalid_argument");
  }
}

TEST(HttpTranslationTest, RepliesMapErrorCodesToHttpStatuses) {
  const std::pair<protocol::ErrorCode, int> cases[] = {
      {protocol::ErrorCode::kInvalidArgument, 400},  {protocol::ErrorCode::kTooLong, 413},
      {protocol::ErrorCode::kOverloaded, 429},       {protocol::ErrorCode::kUnavailable, 503},
      {protocol::ErrorCode::kDeadlineExceeded, 504}, {protocol::ErrorCode::kInternal, 500}};
  for (const auto& [code, status] : cases) {
    const auto a = generate_reply(
        protocol::encode_reply(protocol::error_reply("http-3", {code, "why"})), "theirs");
    EXPECT_EQ(a.status, status) << protocol::wire_name(code);
    const json j = json::parse(a.body);
    EXPECT_EQ(j["id"], "theirs");
    EXPECT_EQ(j["error"]["code"], protocol::wire_name(code));
    EXPECT_EQ(j["error"]["message"], "why");
  }
  protocol::Reply ok;
  ok.id = "http-3";
  ok.texts = {"the spelling"};
  const auto a = generate_reply(protocol::encode_reply(ok), "");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(json::parse(a.body)["text"], "the spelling");
}

// /v1/generate's JSON reply, written from the typed reply, is the msgpack reply's own fields as
// JSON (as it was when the door passed the msgpack map through), with the client's id.
TEST(HttpTranslationTest, TheGenerateReplyIsTheProtocolReplyAsJson) {
  protocol::Reply ok;
  ok.id = "http-4";
  ok.batch_form = true;
  ok.texts = {"the", "spelling"};
  ok.scores = std::vector<float>{-0.25f, -1.5f};
  ok.sequences = std::vector<std::vector<protocol::Sequence>>{{{"the", -0.25f}, {"teh", -2.f}},
                                                              {{"spelling", -1.5f}}};
  ok.usage = {{3, 2, protocol::FinishReason::kEos}, {4, 9, protocol::FinishReason::kLength}};
  ok.timings = {1, 2, 3, 4, 5, 6, 21};
  protocol::Reply single;
  single.texts = {"one"};
  protocol::Reply partial;
  partial.partial = true;
  partial.texts = {"piece"};
  const protocol::Reply error =
      protocol::error_reply("http-4", {protocol::ErrorCode::kTooLong, "texts[0] is long"});
  for (const protocol::Reply& reply : {ok, single, partial, error}) {
    const std::string bytes = protocol::encode_reply(reply);
    json expected = json::from_msgpack(bytes);
    expected["id"] = "mine";
    const HttpAnswer a = generate_reply(bytes, "mine");
    EXPECT_EQ(json::parse(a.body), expected) << expected.dump();
    EXPECT_EQ(a.status, reply.ok ? 200 : 413);
  }
  // Bytes that are no reply: an internal error, answered as such.
  const HttpAnswer bad = generate_reply(std::string("\xc1"), "mine");
  EXPECT_EQ(bad.status, 500);
  EXPECT_EQ(json::parse(bad.body)["error"]["message"], "undecodable reply");
}

TEST(HttpTranslationTest, KServeInferRequestAndResponseAsTheSpecShowsThem) {
  // The spec's example request shape: one BYTES input tensor.
  auto out = kserve_infer_request(R"({
      "id": "42",
      "inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["teh", "speling"]}],
      "parameters": {"max_new_tokens": 6, "timeout_ms": 500}})",
                                  "http-9");
  ASSERT_TRUE(std::holds_alternative<HttpRequest>(out));
  const auto& r = std::get<HttpRequest>(out);
  EXPECT_EQ(r.client_id, "42");
  EXPECT_EQ(r.timeout_ms, 500u);
  const json j = request_json(r);
  EXPECT_EQ(j["texts"], json::array({"teh", "speling"}));
  EXPECT_EQ(j["params"], json({{"max_new_tokens", 6}}));
  EXPECT_EQ(j["timeout_ms"], 500);

  protocol::Reply ok;
  ok.id = "http-9";
  ok.batch_form = true;
  ok.texts = {"the", "spelling"};
  const auto a = kserve_infer_reply(protocol::encode_reply(ok), "42", "speller");
  EXPECT_EQ(a.status, 200);
  const json response = json::parse(a.body);
  EXPECT_EQ(response["model_name"], "speller");
  EXPECT_EQ(response["id"], "42");
  ASSERT_EQ(response["outputs"].size(), 1u);
  EXPECT_EQ(response["outputs"][0], json({{"name", "text"},
                                          {"datatype", "BYTES"},
                                          {"shape", {2}},
                                          {"data", {"the", "spelling"}}}));

  const auto e =
      kserve_infer_reply(protocol::encode_reply(protocol::error_reply(
                             "http-9", {protocol::ErrorCode::kOverloaded, "queue full"})),
                         "42", "speller");
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(json::parse(e.body), json({{"error", "overloaded: queue full"}}));
}

TEST(HttpTranslationTest, KServeInferRequestsThatDoNotFitAreRefused) {
  for (const char* body :
       {R"({"inputs": []})", R"({"inputs": [{"datatype": "FP32", "shape": [1], "data": [1.0]}]})",
        R"({"inputs": [{"datatype": "BYTES", "shape": [3], "data": ["a", "b"]}]})",
        R"({"inputs": [{"datatype": "BYTES", "shape": [1], "data": [7]}]})",
        R"({"inputs": [{"datatype": "BYTES", "shape": [1], "data": ["a"]}], "parameters": 3})",
        // 2^63 + 1 times 2 wraps to 2 in 64 bits: only [N] or [N, 1] are shapes here.
        R"({"inputs": [{"datatype": "BYTES", "shape": [9223372036854775809, 2],
            "data": ["a", "b"]}]})",
        R"({"inputs": [{"datatype": "BYTES", "shape": [1, 2], "data": ["a", "b"]}]})"}) {
    auto out = kserve_infer_request(body, "http-1");
    ASSERT_TRUE(std::holds_alternative<HttpAnswer>(out)) << body;
    EXPECT_EQ(std::get<HttpAnswer>(out).status, 400) << body;
    EXPECT_TRUE(json::parse(std::get<HttpAnswer>(out).body).contains("error")) << body;
  }
  // The path names the model: parameters that are not an object are refused, not indexed.
  for (const char* parameters : {"[]", "\"x\"", "7", "true", "null"}) {
    const std::string body =
        std::string(R"({"inputs": [{"datatype": "BYTES", "shape": [1], "data": ["a"]}], )") +
        R"("parameters": )" + parameters + "}";
    auto out = kserve_infer_request(body, "http-1", std::string("speller"), 2u);
    ASSERT_TRUE(std::holds_alternative<HttpAnswer>(out)) << body;
    EXPECT_EQ(std::get<HttpAnswer>(out).status, 400) << body;
  }
  // [N, 1] is accepted as N texts.
  auto out = kserve_infer_request(
      R"({"inputs": [{"name": "t", "datatype": "BYTES", "shape": [2, 1], "data": [["a"], ["b"]]}]})",
      "http-1");
  ASSERT_TRUE(std::holds_alternative<HttpRequest>(out));
  EXPECT_EQ(request_json(std::get<HttpRequest>(out))["texts"], json::array({"a", "b"}));
}

class HttpFrontDoorTest : public ::testing::Test {
 protected:
  zmq::context_t context;
  TestGateway gateway;
  std::atomic<bool> ready{false};
  HttpFrontDoor door{context, gateway.submissions(),
                     HttpOptions{.host = "127.0.0.1",
                                 .port = 0,
                                 .model_name = "speller",
                                 .max_body_bytes = 4096,
                                 .default_timeout = std::chrono::milliseconds(2000),
                                 .read_timeout = std::chrono::milliseconds(1000)},
                     [this](const std::string&) { return ready.load(); }};
  httplib::Client http{"127.0.0.1", door.port()};
};

TEST_F(HttpFrontDoorTest, GenerateGoesThroughTheGatewayAndBack) {
  auto res = http.Post("/v1/generate", R"({"id": "a", "texts": ["x", "y"]})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const json j = json::parse(res->body);
  EXPECT_EQ(j["id"], "a");
  EXPECT_EQ(j["texts"], json::array({"X", "Y"}));

  res = http.Post("/v1/generate", R"({"text": "busy"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429);
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "overloaded");

  res = http.Post("/v1/generate", R"({"text": "x", "params": {"num_beams": "two"}})",
                  "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << "the gateway's own validation answers";

  res = http.Post("/v1/generate", "not json", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);

  res = http.Post("/v1/generate", std::string(8192, ' '), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413) << "over max_body_bytes";

  res = http.Post("/v1/generate", R"({"text": "still serving"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["text"], "STILL SERVING");
}

TEST_F(HttpFrontDoorTest, KServeHealthMetadataAndInfer) {
  auto res = http.Get("/v2/health/live");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(http.Get("/v2/health/ready")->status, 503);
  ready = true;
  EXPECT_EQ(http.Get("/v2/health/ready")->status, 200);
  EXPECT_EQ(http.Get("/v2/models/speller/ready")->status, 200);

  res = http.Get("/v2/models/speller");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const json meta = json::parse(res->body);
  EXPECT_EQ(meta["name"], "speller");
  EXPECT_EQ(meta["inputs"][0]["datatype"], "BYTES");

  res = http.Get("/v2/models/other");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(json::parse(res->body)["error"],
            "unknown model 'other': this gateway serves 'speller' (GET /v2/models/speller)");
  res = http.Post("/v2/models/other/infer", "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);

  // A path served with another method: 405 and what it takes; an unknown path: named.
  res = http.Get("/v1/generate");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->get_header_value("Allow"), "POST");
  EXPECT_EQ(json::parse(res->body)["error"], "GET is not allowed on /v1/generate: use POST");
  res = http.Post("/v2/health/ready", "{}", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->get_header_value("Allow"), "GET");
  res = http.Get("/v1/generat");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_NE(json::parse(res->body)["error"].get<std::string>().find(
                "no route GET /v1/generat; the routes: POST /v1/generate"),
            std::string::npos)
      << res->body;

  res = http.Post("/v2/models/speller/infer",
                  R"({"id": "7", "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                      "data": ["hello"]}]})",
                  "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const json out = json::parse(res->body);
  EXPECT_EQ(out["id"], "7");
  EXPECT_EQ(out["outputs"][0]["data"], json::array({"HELLO"}));
}

TEST_F(HttpFrontDoorTest, XRequestTimeoutSetsTheDeadlineOfEveryRoute) {
  const httplib::Headers header = {{"X-Request-Timeout", "1234"}};
  auto res = http.Post("/v1/generate", header, R"({"text": "timeout?"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["text"], "1234");
  // It takes the place of the body's own.
  res = http.Post("/v1/generate", header, R"({"text": "timeout?", "timeout_ms": 99})",
                  "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["text"], "1234");
  res = http.Post("/v1/completions", header, R"({"prompt": "timeout?"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], "1234") << res->body;
  res = http.Post("/generate", header, R"({"inputs": "timeout?"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["generated_text"], "1234") << res->body;
  res = http.Post("/v2/models/speller/infer", header,
                  R"({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                      "data": ["timeout?"]}]})",
                  "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["outputs"][0]["data"][0], "1234") << res->body;
  // Without it, the body's or none (the gateway's default).
  res = http.Post("/v1/generate", R"({"text": "timeout?"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["text"], "0");
  // Not a whole number of milliseconds: 400 naming the header, and the door keeps serving.
  for (const char* bad : {"soon", "-5", "1.5", "99999999999", ""}) {
    res = http.Post("/v1/completions", {{"X-Request-Timeout", bad}}, R"({"prompt": "x"})",
                    "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << bad;
    EXPECT_NE(res->body.find("X-Request-Timeout"), std::string::npos) << res->body;
  }
  res = http.Post("/v1/generate", R"({"text": "still serving"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["text"], "STILL SERVING");
}

}  // namespace
}  // namespace seqpipe::gateway
