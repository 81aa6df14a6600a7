// The OpenAI and TGI translations (pure): their options become protocol params the protocol's own
// decoder accepts, unsupported ones are refused naming them, and replies and streamed partials
// take each API's shape.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../common/protocol/option_samples.h"
#include "gateway/http_json.h"
#include "gateway/http_models.h"
#include "gateway/http_openai.h"
#include "gateway/http_tgi.h"
#include "gateway/json_request.h"

namespace seqpipe::gateway {
namespace {

using nlohmann::json;

// The request as the gateway decodes it; fails the test when the protocol refuses it.
protocol::Request decoded(const std::variant<HttpRequest, HttpAnswer>& out) {
  EXPECT_TRUE(std::holds_alternative<HttpRequest>(out))
      << std::get<HttpAnswer>(out).status << " " << std::get<HttpAnswer>(out).body;
  auto request = typed_request(std::get<HttpRequest>(out), *SharedCatalog::only("speller"));
  EXPECT_TRUE(std::holds_alternative<protocol::Request>(request))
      << std::get<protocol::RejectedRequest>(request).error.message;
  return std::get<protocol::Request>(request);
}

json answer_json(const std::variant<HttpRequest, HttpAnswer>& out, int status) {
  EXPECT_TRUE(std::holds_alternative<HttpAnswer>(out));
  EXPECT_EQ(std::get<HttpAnswer>(out).status, status);
  return json::parse(std::get<HttpAnswer>(out).body);
}

std::string reply(const std::string& text, bool partial, std::vector<protocol::Usage> usage = {}) {
  protocol::Reply r;
  r.id = "http-1";
  r.partial = partial;
  r.texts = {text};
  r.usage = std::move(usage);
  return protocol::encode_reply(r);
}

// A `texts` reply, one usage per text.
std::string batch_reply(std::vector<std::string> texts, std::vector<protocol::Usage> usage) {
  protocol::Reply r;
  r.id = "http-1";
  r.batch_form = true;
  r.texts = std::move(texts);
  r.usage = std::move(usage);
  return protocol::encode_reply(r);
}

// The JSON of each "data:" event, [DONE] left out.
std::vector<json> events_of(const std::string& events) {
  std::vector<json> out;
  for (size_t at = 0; (at = events.find("data: ", at)) != std::string::npos;) {
    const size_t end = events.find('\n', at);
    const std::string data = events.substr(at + 6, end - at - 6);
    if (data != "[DONE]") out.push_back(json::parse(data));
    at = end;
  }
  return out;
}

TEST(OpenAiTranslationTest, CompletionOptionsBecomeProtocolParams) {
  const auto r = decoded(openai_request(
      R"({"model": "x", "prompt": "teh", "max_tokens": 9, "temperature": 0.5, "top_p": 0.9,
          "seed": 3, "stop": ".", "stream": true, "user": "u", "min_tokens": 2})",
      "http-1", false, 0));
  EXPECT_EQ(r.texts, std::vector<std::string>{"teh"});
  EXPECT_EQ(r.params.max_new_tokens, 9);
  EXPECT_EQ(r.params.min_new_tokens, 2);
  EXPECT_TRUE(r.params.do_sample);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.seed, 3u);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"."});
  EXPECT_TRUE(r.stream);
  // Temperature 0 is greedy search: the sampling options go with it.
  const auto greedy = decoded(openai_request(R"({"prompt": ["a", "b"], "temperature": 0,
      "top_p": 0.5})",
                                             "http-2", false, 0));
  EXPECT_FALSE(greedy.params.do_sample);
  EXPECT_EQ(greedy.texts, (std::vector<std::string>{"a", "b"}));
}

TEST(OpenAiTranslationTest, ChatTakesTheLastUserMessage) {
  const auto r = decoded(openai_request(
      R"({"messages": [{"role": "user", "content": "old"}, {"role": "system", "content": "s"},
          {"role": "user", "content": [{"type": "text", "text": "teh "},
                                       {"type": "text", "text": "speling"}]},
          {"role": "assistant", "content": "a"}]})",
      "http-1", true, 0));
  EXPECT_EQ(r.texts, std::vector<std::string>{"teh speling"});
  const json e = answer_json(
      openai_request(R"({"messages": [{"role": "system", "content": "s"}]})", "h", true, 0), 400);
  EXPECT_EQ(e["error"]["param"], "messages");
}

TEST(OpenAiTranslationTest, UnsupportedOptionsAreRefusedNamingThem) {
  for (const std::string field : {"n", "logprobs", "best_of", "presence_penalty"}) {
    const json e = answer_json(
        openai_request(R"({"prompt": "a", ")" + field + R"(": 2})", "h", false, 0), 400);
    EXPECT_EQ(e["error"]["param"], field);
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  }
  // Their unused values pass, as the SDKs may send them.
  decoded(
      openai_request(R"({"prompt": "a", "n": 1, "logprobs": null, "echo": false})", "h", false, 0));
  EXPECT_EQ(
      answer_json(openai_request(R"({"prompt": [1, 2]})", "h", false, 0), 400)["error"]["param"],
      "prompt");
  EXPECT_EQ(answer_json(openai_request(R"({"prompt": ["a", "b"], "stream": true})", "h", false, 0),
                        400)["error"]["param"],
            "stream");
}

TEST(OpenAiTranslationTest, RepliesAndChunksTakeOpenAisShape) {
  HttpRequest chat;
  chat.internal_id = "http-1";
  chat.chat = true;
  chat.created = 42;
  const json whole = json::parse(openai_reply(reply("the spelling", false), chat, "m").body);
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["created"], 42);
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "the spelling");
  const std::string piece = openai_events(reply("the ", true), chat, "m");
  EXPECT_EQ(json::parse(piece.substr(6))["choices"][0]["delta"]["content"], "the ");
  EXPECT_EQ(piece.find("[DONE]"), std::string::npos);
  const std::string last = openai_events(reply("the spelling", false), chat, "m");
  EXPECT_TRUE(last.ends_with("data: [DONE]\n\n"));
  const json end = json::parse(last.substr(6, last.find('\n') - 6));
  EXPECT_EQ(end["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(end["choices"][0]["delta"], json::object());
  const auto error = protocol::encode_reply(
      protocol::error_reply("http-1", {protocol::ErrorCode::kOverloaded, "full"}));
  const HttpAnswer refused = openai_reply(error, chat, "m");
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(json::parse(refused.body)["error"]["code"], "overloaded");
}

// GET /v1/models lists every model the catalog routes to; /v1/models/<name> and KServe's
// /v2/models/<name>[/versions/<v>] answer for each of them, and for nothing else.
TEST(ModelListingTest, EveryModelServedIsListedAndDescribed) {
  const config::ModelCatalog catalog({{"alpha", 1, "a"}, {"beta", 1, "b1"}, {"beta", 2, "b2"}},
                                     "alpha");
  const auto body = [&](std::string_view path) {
    const auto answer = model_listing(catalog, path);
    EXPECT_TRUE(answer) << path;
    EXPECT_EQ(answer ? answer->status : 0, 200) << path;
    return answer ? json::parse(answer->body) : json();
  };
  const json list = body("/v1/models");
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 2u);
  EXPECT_EQ(list["data"][0]["id"], "alpha");
  EXPECT_EQ(list["data"][1]["id"], "beta");
  EXPECT_EQ(body("/v1/models/beta")["id"], "beta");
  EXPECT_EQ(body("/v2/models/beta")["versions"], json({"1", "2"}));
  EXPECT_EQ(body("/v2/models/beta/versions/1")["versions"], json({"1"}));
  for (std::string_view other : {"/v1/models/gamma", "/v1/models/", "/v2/models/gamma",
                                 "/v2/models/beta/versions/3", "/v2/models/beta/ready", "/info"})
    EXPECT_FALSE(model_listing(catalog, other)) << other;
  // A pipeline without a repository: its one model.
  const config::ModelCatalog single({{"m", 1, "dir"}}, "m", /*single=*/true);
  EXPECT_EQ(json::parse(model_listing(single, "/v1/models")->body)["data"][0]["id"], "m");
}

// With a repository, a completion's reply names the model the request named.
TEST(OpenAiTranslationTest, TheReplyNamesTheModelRequested) {
  const auto routed = openai_request(R"({"model": "beta", "prompt": "x"})", "http-1", false, 0,
                                     /*route_model=*/true);
  EXPECT_EQ(decoded(routed).model, "beta");
  EXPECT_EQ(std::get<HttpRequest>(routed).model, "beta");
  // Without one the name is not checked (a client may send its endpoint's URL there).
  const auto any = openai_request(R"({"model": "http://x/v1", "prompt": "x"})", "http-1", false, 0);
  EXPECT_EQ(decoded(any).model, std::nullopt);
  EXPECT_EQ(std::get<HttpRequest>(any).model, "");
}

TEST(OpenAiTranslationTest, ChoicesSayWhyTheyEndedAndTheReplyHowManyTokens) {
  HttpRequest completion;
  completion.internal_id = "http-1";
  const json whole = json::parse(
      openai_reply(batch_reply({"a", "b", "c"}, {{5, 3, protocol::FinishReason::kLength},
                                                 {7, 2, protocol::FinishReason::kEos},
                                                 {4, 1, protocol::FinishReason::kStop}}),
                   completion, "m")
          .body);
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(whole["choices"][2]["finish_reason"], "stop");
  EXPECT_EQ(whole["usage"],
            (json{{"prompt_tokens", 16}, {"completion_tokens", 6}, {"total_tokens", 22}}));
  // A reply without usage (a gateway that does not count) still says "stop", without usage.
  const json bare = json::parse(openai_reply(reply("a", false), completion, "m").body);
  EXPECT_EQ(bare["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(bare.contains("usage"));
}

TEST(OpenAiTranslationTest, IncludeUsageAddsAUsageChunkBeforeDone) {
  const auto asked = openai_request(
      R"({"prompt": "a", "stream": true, "stream_options": {"include_usage": true}})", "h", false,
      0);
  ASSERT_TRUE(std::holds_alternative<HttpRequest>(asked));
  const HttpRequest& request = std::get<HttpRequest>(asked);
  EXPECT_TRUE(request.include_usage);
  const auto piece = events_of(openai_events(reply("the ", true), request, "m"));
  ASSERT_EQ(piece.size(), 1u);
  EXPECT_TRUE(piece[0].contains("usage") && piece[0]["usage"].is_null());
  const std::string last_events = openai_events(
      reply("the end", false, {{6, 3, protocol::FinishReason::kLength}}), request, "m");
  EXPECT_TRUE(last_events.ends_with("data: [DONE]\n\n"));
  const auto last = events_of(last_events);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last[0]["usage"].is_null());
  EXPECT_EQ(last[1]["choices"], json::array());
  EXPECT_EQ(last[1]["usage"],
            (json{{"prompt_tokens", 6}, {"completion_tokens", 3}, {"total_tokens", 9}}));
  EXPECT_EQ(last[1]["id"], last[0]["id"]);
  // Not asked (or not streamed): no usage key in chunks, no usage chunk.
  for (const char* body : {R"({"prompt": "a", "stream": true})",
                           R"({"prompt": "a", "stream_options": {"include_usage": true}})"}) {
    const auto plain = openai_request(body, "h", false, 0);
    ASSERT_TRUE(std::holds_alternative<HttpRequest>(plain));
    EXPECT_FALSE(std::get<HttpRequest>(plain).include_usage) << body;
  }
  HttpRequest plain;
  const auto events = events_of(
      openai_events(reply("x", false, {{1, 1, protocol::FinishReason::kEos}}), plain, "m"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_FALSE(events[0].contains("usage"));
}

TEST(TgiTranslationTest, ParametersBecomeProtocolParams) {
  const auto r = decoded(tgi_request(
      R"({"inputs": "teh", "parameters": {"max_new_tokens": 7, "top_k": 5, "seed": 2,
          "repetition_penalty": 1.2, "stop": ["."], "details": false}})",
      "http-1", true));
  EXPECT_EQ(r.params.max_new_tokens, 7);
  EXPECT_TRUE(r.params.do_sample);  // a sampling parameter turns sampling on, as in TGI
  EXPECT_EQ(r.params.top_k, 5);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.2f);
  EXPECT_TRUE(r.stream);
  const json e = answer_json(
      tgi_request(R"({"inputs": "a", "parameters": {"decoder_input_details": true}})", "h", false),
      422);
  EXPECT_EQ(e["error_type"], "validation");
  EXPECT_NE(e["error"].get<std::string>().find("parameters.decoder_input_details"),
            std::string::npos);
}

TEST(TgiTranslationTest, DetailsSayWhyTheTextEndedAndHowManyTokens) {
  const auto asked = tgi_request(R"({"inputs": "a", "parameters": {"details": true}})", "h", false);
  ASSERT_TRUE(std::holds_alternative<HttpRequest>(asked));
  const HttpRequest& request = std::get<HttpRequest>(asked);
  EXPECT_TRUE(request.details);
  const std::pair<protocol::FinishReason, const char*> names[] = {
      {protocol::FinishReason::kEos, "eos_token"},
      {protocol::FinishReason::kLength, "length"},
      {protocol::FinishReason::kStop, "stop_sequence"}};
  for (const auto& [reason, name] : names) {
    const json whole =
        json::parse(tgi_reply(reply("the end", false, {{6, 3, reason}}), request).body);
    EXPECT_EQ(whole["generated_text"], "the end");
    EXPECT_EQ(whole["details"]["finish_reason"], name);
    EXPECT_EQ(whole["details"]["generated_tokens"], 3);
    EXPECT_EQ(whole["details"]["tokens"], json::array());
  }
  const json last = json::parse(
      tgi_event(reply("the end", false, {{6, 3, protocol::FinishReason::kLength}}), 2, request)
          .substr(6));
  EXPECT_EQ(last["details"], (json{{"finish_reason", "length"},
                                   {"generated_tokens", 3},
                                   {"input_length", 6},
                                   {"seed", nullptr}}));
  EXPECT_TRUE(
      json::parse(tgi_event(reply("the ", true), 1, request).substr(6))["details"].is_null());
  // Not asked: no details.
  HttpRequest plain;
  EXPECT_FALSE(
      json::parse(tgi_reply(reply("x", false, {{1, 1, protocol::FinishReason::kEos}}), plain).body)
          .contains("details"));
}

TEST(TgiTranslationTest, EventsCarryTextPiecesThenTheWholeText) {
  const HttpRequest plain;
  const json piece = json::parse(tgi_event(reply("the ", true), 0, plain).substr(6));
  EXPECT_EQ(piece["token"]["text"], "the ");
  EXPECT_FALSE(piece["token"]["special"]);
  EXPECT_TRUE(piece["generated_text"].is_null());
  const json last = json::parse(tgi_event(reply("the end", false), 3, plain).substr(6));
  EXPECT_EQ(last["index"], 3);
  EXPECT_TRUE(last["token"]["special"]);
  EXPECT_EQ(last["generated_text"], "the end");
  EXPECT_TRUE(last["details"].is_null());
  EXPECT_EQ(json::parse(tgi_reply(reply("the end", false), plain).body)["generated_text"],
            "the end");
}

// The request `front` makes of `body` must carry `option`'s sample (and the test fails when a
// front door drops an option its column names).
void expect_sample(const std::variant<HttpRequest, HttpAnswer>& front,
                   const protocol::GenerateOption& option, const std::string& door) {
  SCOPED_TRACE(door + ": " + std::string(option.name));
  const protocol::Request r = decoded(front);
  const protocol::GenerateParams want = testing::with_sample(r.params, option);
  EXPECT_EQ(protocol::value_text(option, r.params), protocol::value_text(option, want));
  EXPECT_FALSE(protocol::is_default(option, r.params));
}

// Every row of the option table, under each front door's name for it: each door declares a name
// or "not supported" for every row (FrontName has no default), and each named one arrives.
TEST(FrontDoorOptionsTest, EveryOptionReachesEveryFrontDoorThatNamesIt) {
  for (const protocol::GenerateOption& option : protocol::generate_options()) {
    const json sample = testing::option_sample(option);
    json params = testing::option_companions(option);
    params[std::string(option.name)] = sample;
    // /v1/generate and KServe v2: the protocol's own names.
    expect_sample(generate_request(json{{"text", "a"}, {"params", params}}.dump(), "h"), option,
                  "/v1/generate");
    expect_sample(
        kserve_infer_request(
            json{{"inputs",
                  {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"a"}}}}},
                 {"parameters", params}}
                .dump(),
            "h"),
        option, "KServe v2");
    for (const auto& [door, name] :
         {std::pair{"OpenAI", option.openai}, std::pair{"TGI", option.tgi}}) {
      if (!name.supported()) continue;
      for (const std::string_view alias : {name.name, name.alias}) {
        if (alias.empty()) continue;
        const bool openai = std::string(door) == "OpenAI";
        // OpenAI samples only with a temperature above 0.
        json body = openai && option.name != "temperature" ? json{{"temperature", 0.7}} : json{};
        body[std::string(alias)] = sample;
        if (openai) {
          body["prompt"] = "a";
          expect_sample(openai_request(body.dump(), "h", false, 0), option, door);
        } else {
          expect_sample(tgi_request(json{{"inputs", "a"}, {"parameters", body}}.dump(), "h", false),
                        option, door);
        }
      }
    }
  }
}

}  // namespace
}  // namespace seqpipe::gateway

namespace seqpipe::gateway {
namespace {

TEST(OpenAiStrictTest, TypesAndRangesAreRefusedInOpenAisShape) {
  struct Case {
    const char* field;  // "name": value
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {R"("temperature": -1)", "temperature", "decimal_below_min_value"},
      {R"("temperature": 2.5)", "temperature", "decimal_above_max_value"},
      {R"("temperature": "0.5")", "temperature", "invalid_type"},
      {R"("top_p": 2)", "top_p", "decimal_above_max_value"},
      {R"("top_p": 0)", "top_p", "decimal_below_min_value"},
      {R"("seed": "7")", "seed", "invalid_type"},
      {R"("seed": 1.5)", "seed", "invalid_type"},
      {R"("stream": "true")", "stream", "invalid_type"},
      {R"("max_tokens": 0)", "max_tokens", "integer_below_min_value"},
      {R"("max_tokens": 1.5)", "max_tokens", "invalid_type"},
      {R"("n": "2")", "n", "invalid_type"},
      {R"("n": 0)", "n", "integer_below_min_value"},
      {R"("presence_penalty": 3)", "presence_penalty", "decimal_above_max_value"},
      {R"("stream_options": true)", "stream_options", "invalid_type"},
  };
  for (const bool chat : {false, true}) {
    for (const Case& c : cases) {
      const std::string input =
          chat ? R"("messages": [{"role": "user", "content": "a"}])" : R"("prompt": "a")";
      const std::string body = "{" + input + ", " + c.field + "}";
      const json error = answer_json(openai_request(body, "h", chat, 0), 400)["error"];
      EXPECT_EQ(error["type"], "invalid_request_error") << body;
      EXPECT_EQ(error["param"], c.param) << body;
      EXPECT_EQ(error["code"], c.code) << body;
      EXPECT_NE(error["message"].get<std::string>().find(c.param), std::string::npos) << body;
    }
  }
  const json below = answer_json(
      openai_request(R"({"prompt": "a", "temperature": -1})", "h", false, 0), 400)["error"];
  EXPECT_EQ(below["message"],
            "Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but got "
            "-1 instead.");
  // The edges of each range, and null (every option's default), are served.
  for (const char* fields :
       {R"("temperature": 0, "top_p": 1, "max_tokens": 1, "n": 1, "stream": false)",
        R"("temperature": 2, "top_p": 0.01, "seed": 7, "stream": null)",
        R"("temperature": null, "top_p": null, "max_tokens": null, "n": null)"}) {
    decoded(openai_request(std::string(R"({"prompt": "a", )") + fields + "}", "h", false, 0));
  }
}

TEST(TgiStrictTest, TypesAndRangesAreRefusedWithTgisValidationErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {R"("temperature": 0)", "`temperature` must be strictly positive"},
      {R"("repetition_penalty": -1)", "`repetition_penalty` must be strictly positive"},
      {R"("top_k": -1)", "`top_k` must be strictly positive"},
      {R"("top_p": 1.0)", "`top_p` must be > 0.0 and < 1.0"},
      {R"("top_p": 0)", "`top_p` must be > 0.0 and < 1.0"},
      {R"("max_new_tokens": 0)", "`max_new_tokens` must be strictly positive"},
      {R"("seed": -1)", "parameters.seed: invalid type: number -1, expected an unsigned integer"},
      {R"("do_sample": "yes")",
       "parameters.do_sample: invalid type: string \"yes\", expected a boolean"},
      {R"("max_new_tokens": 2.5)",
       "parameters.max_new_tokens: invalid type: number 2.5, expected an integer"},
  };
  for (const auto& [field, message] : cases) {
    const std::string body = std::string(R"({"inputs": "a", "parameters": {)") + field + "}}";
    const json error = answer_json(tgi_request(body, "h", false), 422);
    EXPECT_EQ(error["error_type"], "validation") << body;
    EXPECT_NE(error["error"].get<std::string>().find(message), std::string::npos)
        << body << " -> " << error["error"];
  }
  decoded(tgi_request(
      R"({"inputs": "a", "parameters": {"temperature": 0.1, "top_p": 0.99, "seed": 0,
          "max_new_tokens": 1, "top_k": null}})",
      "h", false));
}

TEST(InvalidUtf8Test, EveryJsonDoorNamesTheBodyAsNotUtf8) {
  const std::string body = std::string(R"({"text": "a)") + "\xff" + R"("})";
  const std::string expected = "the body is not valid UTF-8 (byte 11)";
  EXPECT_EQ(answer_json(generate_request(body, "h"), 400)["error"]["message"], expected);
  EXPECT_EQ(answer_json(kserve_infer_request(body, "h"), 400)["error"], expected);
  EXPECT_EQ(answer_json(openai_request(body, "h", false, 0), 400)["error"]["message"], expected);
  EXPECT_EQ(answer_json(tgi_request(body, "h", false), 422)["error"], expected);
  // Valid UTF-8 that is not a JSON object keeps its answer.
  EXPECT_EQ(answer_json(tgi_request("[1]", "h", false), 422)["error"],
            "the body must be a JSON object with \"inputs\"");
}

}  // namespace
}  // namespace seqpipe::gateway
