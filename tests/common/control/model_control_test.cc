// The model control messages' codecs: what is encoded decodes to the same, and what is not a
// message of its kind is refused (a request with why, naming the field).
#include "seqpipe/control/model_control.h"

#include <gtest/gtest.h>

#include "seqpipe/config/config.h"
#include "seqpipe/protocol/msgpack_io.h"

namespace seqpipe::model_control {
namespace {

TEST(ModelControl, CatalogAndInFlightRoundTrip) {
  config::PipelineConfig speller;
  speller.gateway.split_words = 8;
  speller.decoder.max_new_tokens = 40;
  speller.batcher.priority_levels = 3;
  VersionSettings bad;
  bad.not_loaded = "seqpipe.yaml: batcher.replicas is not a model's setting";
  const std::vector<CatalogEntry> catalog = {
      {{"alpha", 1, "/r/alpha/1"}, version_settings(speller)}, {{"beta", 12, "/r/beta"}, bad}};
  const auto decoded = decode_catalog(encode_catalog(catalog));
  EXPECT_EQ(decoded, catalog);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->at(0).settings.split_words, 8u);
  EXPECT_EQ(decoded->at(0).settings.limits.max_new_tokens_cap, 40);
  EXPECT_EQ(decoded->at(0).settings.limits.priority_levels, 3);
  EXPECT_EQ(decode_catalog(encode_catalog({})), std::vector<CatalogEntry>{});
  const InFlight in_flight = {{"alpha/1", 3}, {"beta/12", 0}};
  EXPECT_EQ(decode_in_flight(encode_in_flight(in_flight)), in_flight);
}

TEST(ModelControl, ALongNotLoadedReasonGoesCut) {
  VersionSettings bad;
  bad.not_loaded = std::string(100000, 'x');
  const auto decoded = decode_catalog(encode_catalog({{{"alpha", 1, "/r/alpha/1"}, bad}}));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->at(0).settings.not_loaded, std::string(kMaxReasonBytes, 'x'));
}

TEST(ModelControl, BadCatalogsAreRefused) {
  EXPECT_FALSE(decode_catalog("\x93").has_value());                          // an array cut short
  EXPECT_FALSE(decode_catalog(encode_in_flight({{"a/1", 1}})).has_value());  // a map
  EXPECT_FALSE(
      decode_catalog(encode_catalog({{{"../x", 1, "/r"}, {}}})).has_value());  // a bad name
  // A row without its settings (a v1 catalog), and settings missing a field.
  std::string v1;
  msgpack_io::Writer rows(v1);
  rows.array(1), rows.array(3), rows.str("alpha"), rows.i64(1), rows.str("/r/alpha/1");
  EXPECT_FALSE(decode_catalog(v1).has_value());
  std::string short_settings;
  msgpack_io::Writer cut(short_settings);
  cut.array(1), cut.array(4), cut.str("alpha"), cut.i64(1), cut.str("/r/alpha/1");
  cut.map(1), cut.str("split_words"), cut.i64(2);
  EXPECT_FALSE(decode_catalog(short_settings).has_value());
}

TEST(ModelControl, RequestsAndRepliesRoundTrip) {
  for (const ControlRequest& r :
       {ControlRequest{Op::kIndex, "", std::nullopt}, ControlRequest{Op::kLoad, "alpha", 2},
        ControlRequest{Op::kUnload, "alpha", std::nullopt}}) {
    const auto decoded = decode_request(encode(r));
    ASSERT_TRUE(std::holds_alternative<ControlRequest>(decoded));
    EXPECT_EQ(std::get<ControlRequest>(decoded), r);
  }
  const ControlReply reply{protocol::Error{protocol::ErrorCode::kNotFound, "no 'x'"},
                           {{"alpha", 1, State::kReady, ""},
                            {"alpha", 2, State::kUnavailable, "unloaded"},
                            {"beta", 1, State::kUnloading, ""}}};
  EXPECT_EQ(decode_reply(encode(reply)), reply);
  EXPECT_EQ(decode_reply(encode(ControlReply{})), ControlReply{});
}

TEST(ModelControl, ABadRequestSaysWhy) {
  auto why = [](const ControlRequest& r) {
    return std::get<std::string>(decode_request(encode(r)));
  };
  EXPECT_EQ(why({Op::kLoad, "", std::nullopt}), "'' is not a model name");
  EXPECT_EQ(why({Op::kUnload, "a/b", 1}), "'a/b' is not a model name");
  EXPECT_NE(std::get<std::string>(decode_request("\xc1")).find("not a control request"),
            std::string::npos);
}

// Bytes written by hand, as another peer would: the readers of the shared codec name the field.
// `fill` writes the map's entries.
template <typename Fill>
std::string map_of(size_t entries, Fill fill) {
  std::string bytes;
  msgpack_io::Writer out(bytes);
  out.map(entries);
  fill(out);
  return bytes;
}

TEST(ModelControl, AFieldOfTheWrongTypeIsNamed) {
  const auto why = std::get<std::string>(decode_request(map_of(
      2, [](msgpack_io::Writer& w) { w.str("op"), w.str("load"), w.str("name"), w.i64(3); })));
  EXPECT_EQ(why.rfind("not a control request: name must be a string", 0), 0u) << why;
  const auto version = std::get<std::string>(decode_request(map_of(3, [](msgpack_io::Writer& w) {
    w.str("op"), w.str("load"), w.str("name"), w.str("a"), w.str("version"), w.f32(1.5f);
  })));
  EXPECT_NE(version.find("version must be an integer"), std::string::npos) << version;
  EXPECT_FALSE(decode_reply(map_of(1, [](msgpack_io::Writer& w) { w.str("models"), w.str("x"); })));
  EXPECT_FALSE(
      decode_in_flight(map_of(1, [](msgpack_io::Writer& w) { w.str("a/1"), w.str("3"); })));
  EXPECT_EQ(decode_in_flight(map_of(1, [](msgpack_io::Writer& w) { w.str("a/1"), w.i64(3); })),
            (InFlight{{"a/1", 3}}));
}

TEST(ModelControl, FieldsOfANewerPeerAndAbsentOnesAreFine) {
  const auto request = decode_request(map_of(3, [](msgpack_io::Writer& w) {
    w.str("op"), w.str("unload"), w.str("name"), w.str("alpha"), w.str("since"), w.i64(7);
  }));
  ASSERT_TRUE(std::holds_alternative<ControlRequest>(request));
  EXPECT_EQ(std::get<ControlRequest>(request),
            (ControlRequest{Op::kUnload, "alpha", std::nullopt}));
  EXPECT_EQ(std::get<std::string>(decode_request(map_of(0, [](msgpack_io::Writer&) {}))),
            "unknown op '' (index, load, unload)");
  EXPECT_EQ(decode_reply(map_of(0, [](msgpack_io::Writer&) {})), ControlReply{});
}

TEST(ModelControl, AnIndexPastTheLimitSaysHowManyAreLeftOut) {
  ControlReply reply;
  reply.models.resize(kMaxIndexEntries + 3, ModelEntry{"m", 1, State::kReady, ""});
  const auto decoded = decode_reply(encode(reply));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->models.size(), kMaxIndexEntries);
  EXPECT_EQ(decoded->more, 3u);
}

}  // namespace
}  // namespace seqpipe::model_control
