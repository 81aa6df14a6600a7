// The gateway's response cache: keys, LRU order, the byte budget, and the gateway answering
// repeated texts from it (only successful results are kept).
#include "gateway/response_cache.h"

#include <gtest/gtest.h>

#include "../common/protocol/option_samples.h"
#include "gateway/gateway.h"
#include "seqpipe/config/config.h"

namespace seqpipe::gateway {
namespace {

TEST(ResponseCache, KeysHoldTheExactTextTheModelAndEveryParam) {
  protocol::GenerateParams p;
  // The reply keeps the text's whitespace, so whitespace is part of the key.
  EXPECT_NE(cache_key("m", p, " teh  speling "), cache_key("m", p, "teh speling"));
  EXPECT_NE(cache_key("m", p, "teh\tspeling"), cache_key("m", p, "teh speling"));
  EXPECT_NE(cache_key("m", p, "teh speling"), cache_key("m", p, "Teh speling"));
  EXPECT_NE(cache_key("m", p, "x"), cache_key("other-model", p, "x"));
  // Every option that changes the output is in the key (the option table says which).
  for (const protocol::GenerateOption& option : protocol::generate_options()) {
    const protocol::GenerateParams q = testing::with_sample(p, option);
    if (option.changes_output) {
      EXPECT_NE(cache_key("m", p, "x"), cache_key("m", q, "x")) << option.name;
    } else {
      EXPECT_EQ(cache_key("m", p, "x"), cache_key("m", q, "x")) << option.name;
    }
  }
  protocol::GenerateParams urgent = p;
  urgent.priority = 1;  // scheduling only: the same output
  EXPECT_EQ(cache_key("m", p, "x"), cache_key("m", urgent, "x"));
  // Two stop lists that join to the same characters are not the same key.
  protocol::GenerateParams ab = p, a_b = p;
  ab.stop = {"ab"};
  a_b.stop = {"a", "b"};
  EXPECT_NE(cache_key("m", ab, "x"), cache_key("m", a_b, "x"));
}

TEST(ResponseCache, UnseededSamplingAndSeveralSequencesAreNotCached) {
  protocol::GenerateParams p;
  EXPECT_TRUE(cacheable(p));
  p.do_sample = true;
  EXPECT_FALSE(cacheable(p));
  p.seed = 7;
  EXPECT_TRUE(cacheable(p));
  p.num_beams = 2;
  p.do_sample = false;
  p.num_return_sequences = 2;
  EXPECT_FALSE(cacheable(p));
}

TEST(ResponseCache, EvictsLeastRecentlyUsedWithinTheByteBudget) {
  ResponseCache probe(1 << 20);
  probe.put("a", {"A", 0});
  const size_t one = probe.bytes();  // what one such entry costs
  ResponseCache cache(2 * one + one / 2);
  cache.put("a", {"A", 0});
  cache.put("b", {"B", 0});
  ASSERT_TRUE(cache.get("a").has_value());  // a becomes the most recent
  cache.put("c", {"C", 0});                 // over budget: b, the least recent, goes
  EXPECT_FALSE(cache.get("b").has_value());
  EXPECT_EQ(cache.get("a")->text, "A");
  EXPECT_EQ(cache.get("c")->text, "C");
  EXPECT_LE(cache.bytes(), 2 * one + one / 2);
  EXPECT_EQ(cache.size(), 2u);
  cache.put("huge", {std::string(10 * one, 'x'), 0});  // larger than the budget: not stored
  EXPECT_FALSE(cache.get("huge").has_value());
  EXPECT_EQ(cache.size(), 2u);
  ResponseCache off(0);
  off.put("a", {"A", 0});
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.get("a").has_value());
}

TEST(ResponseCache, TheGatewayAnswersARepeatedTextFromTheCacheAndNeverCachesErrors) {
  auto registry = metrics::make_registry();
  metrics::StageMetrics stage(*registry, "gateway");
  metrics::GatewayMetrics gw(*registry);
  config::PipelineConfig c;
  c.gateway.cache_bytes = 1 << 20;
  Gateway g(c, "ipc:///tmp/r.sock", stage, gw);
  const Now t0{SteadyClock::time_point{} + std::chrono::hours(1), 1'700'000'000'000'000};
  auto request = [](const std::string& text) {
    protocol::Request r;
    r.id = text;  // its own id: one id in flight twice is one request
    r.texts = {text};
    return std::vector<std::string>{"client", "", protocol::encode_request(r)};
  };
  auto reply_text = [](const Outbox& out) {
    const std::string& b = out.replies.back().second;
    auto r = std::get<protocol::Reply>(protocol::decode_reply(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), b.size())));
    return r.ok ? r.texts.at(0) : "error:" + std::string(protocol::wire_name(r.error->code));
  };
  Outbox out;
  g.on_tokenizer("tok", stage::Ready{8}, t0);
  g.on_client(request("teh speling"), t0, out);
  g.on_client(request("bad one"), t0, out);
  g.dispatch(t0, out);
  ASSERT_EQ(out.sends.size(), 2u);
  auto result_of = [&](size_t i) {  // the result for the one text sent to a tokenizer
    const stage::TextItem& item = std::get<stage::Tokenize>(out.sends[i].message).items[0];
    stage::ResultItem r;
    r.request = item.request;
    r.index = item.index;
    r.timings = item.timings;
    return stage::Result{{r}};
  };
  stage::Result ok = result_of(0);
  ok.items[0].text = "the spelling";
  stage::Result failed = result_of(1);
  failed.items[0].error = protocol::Error{protocol::ErrorCode::kInternal, "boom"};
  g.on_results(std::move(ok), t0, out);
  g.on_results(std::move(failed), t0, out);
  ASSERT_EQ(out.replies.size(), 2u);
  out.clear();
  g.on_client(request("teh speling"), t0, out);  // a hit: answered at once, nothing sent
  ASSERT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(reply_text(out), "the spelling");
  g.on_client(request("bad one"), t0, out);  // the error was not cached: it goes to a tokenizer
  g.on_client(request("teh\tspeling"), t0, out);  // other whitespace, another reply: a miss
  g.dispatch(t0, out);
  EXPECT_EQ(out.replies.size(), 1u);
  EXPECT_EQ(out.sends.size(), 2u);
  EXPECT_EQ(g.in_flight(), 2u);
}

}  // namespace
}  // namespace seqpipe::gateway
