// The OpenAI and TGI translations (pure): their options become protocol params the protocol's own
// decoder accepts, unsupported ones are refused naming them, and replies and streamed partials
// take each API's shape.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gateway/http_openai.h"
#include "gateway/http_tgi.h"

namespace seqpipe::gateway {
namespace {

using nlohmann::json;

// The request as the gateway decodes it; fails the test when the protocol refuses it.
protocol::Request decoded(const std::variant<HttpRequest, HttpAnswer>& out) {
  EXPECT_TRUE(std::holds_alternative<HttpRequest>(out))
      << std::get<HttpAnswer>(out).status << " " << std::get<HttpAnswer>(out).body;
  const std::string& bytes = std::get<HttpRequest>(out).msgpack;
  auto request = protocol::decode_request(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      protocol::Limits{});
  EXPECT_TRUE(std::holds_alternative<protocol::Request>(request))
      << std::get<protocol::RejectedRequest>(request).error.message;
  return std::get<protocol::Request>(request);
}

json answer_json(const std::variant<HttpRequest, HttpAnswer>& out, int status) {
  EXPECT_TRUE(std::holds_alternative<HttpAnswer>(out));
  EXPECT_EQ(std::get<HttpAnswer>(out).status, status);
  return json::parse(std::get<HttpAnswer>(out).body);
}

std::string reply(const std::string& text, bool partial) {
  protocol::Reply r;
  r.id = "http-1";
  r.partial = partial;
  r.texts = {text};
  return protocol::encode_reply(r);
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
      tgi_request(R"({"inputs": "a", "parameters": {"details": true}})", "h", false), 422);
  EXPECT_EQ(e["error_type"], "validation");
  EXPECT_NE(e["error"].get<std::string>().find("parameters.details"), std::string::npos);
}

TEST(TgiTranslationTest, EventsCarryTextPiecesThenTheWholeText) {
  const json piece = json::parse(tgi_event(reply("the ", true), 0).substr(6));
  EXPECT_EQ(piece["token"]["text"], "the ");
  EXPECT_FALSE(piece["token"]["special"]);
  EXPECT_TRUE(piece["generated_text"].is_null());
  const json last = json::parse(tgi_event(reply("the end", false), 3).substr(6));
  EXPECT_EQ(last["index"], 3);
  EXPECT_TRUE(last["token"]["special"]);
  EXPECT_EQ(last["generated_text"], "the end");
  EXPECT_EQ(json::parse(tgi_reply(reply("the end", false)).body)["generated_text"], "the end");
}

}  // namespace
}  // namespace seqpipe::gateway
