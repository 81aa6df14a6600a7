// Hostile clients against the gateway's real front doors, in process, over real loopback sockets:
// mutated bodies for every HTTP POST route and mutated KServe messages for every gRPC call each
// get an answer, no handler throws (the boundary's counter stays 0) and the doors keep serving;
// a ModelStreamInfer client that never reads has its call finished RESOURCE_EXHAUSTED once the
// door's queue for it is full. Deterministic (fixed seeds) and bounded (a few seconds).
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>
#include <prometheus/registry.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "gateway/grpc_front_door.h"
#include "gateway/handler_boundary.h"
#include "gateway/http_front_door.h"
#include "gateway/kserve_grpc.h"
#include "grpc_predict_v2.grpc.pb.h"
#include "seqpipe/protocol/generate_options.h"
#include "test_gateway.h"

namespace seqpipe::gateway {
namespace {

using nlohmann::json;
using Door = metrics::FrontDoorMetrics::Door;

constexpr uint32_t kSeed = 20261128;
constexpr int kPerRoute = 400;  // mutated bodies per HTTP route
constexpr int kGrpcCalls = 1000;

// Values a mutation puts where a field was: every JSON type, edges of every number kind.
json palette(std::mt19937& rng) {
  static const json values[] = {nullptr,
                                true,
                                false,
                                0,
                                -1,
                                1,
                                2,
                                0.5,
                                -0.0,
                                1e308,
                                -1e308,
                                18446744073709551615ull,
                                -9223372036854775807ll - 1,
                                4294967296ull,
                                "",
                                "x",
                                "generate",
                                "cancel",
                                "BYTES",
                                json::array(),
                                json::object(),
                                json::array({1, "a", nullptr}),
                                json::array({json::array({"a"})}),
                                json{{"a", json::array()}},
                                std::string(5000, 'w')};
  return values[rng() % std::size(values)];
}

// Field names of every door, so mutations add fields a door reads, not only unknown ones.
const char* const kFields[] = {"id",
                               "text",
                               "texts",
                               "params",
                               "timeout_ms",
                               "stream",
                               "op",
                               "v",
                               "model",
                               "version",
                               "inputs",
                               "parameters",
                               "datatype",
                               "shape",
                               "data",
                               "prompt",
                               "messages",
                               "role",
                               "content",
                               "type",
                               "max_tokens",
                               "temperature",
                               "top_p",
                               "seed",
                               "n",
                               "stop",
                               "logprobs",
                               "stream_options",
                               "details",
                               "do_sample",
                               "top_k",
                               "best_of",
                               "echo",
                               "include_usage",
                               "num_beams",
                               "max_new_tokens",
                               "num_return_sequences",
                               "frequency_penalty",
                               "return_scores",
                               "priority",
                               "ready",
                               "config"};

// Every node of `j` (as JSON pointers), the root included.
void nodes(const json& j, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  out.push_back(at);
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) nodes(value, at / key, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) nodes(j[i], at / i, out);
  }
}

// One to three structural changes: a node replaced, a field dropped or a field added.
std::string mutate_json(json j, std::mt19937& rng) {
  for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n) {
    std::vector<json::json_pointer> all;
    nodes(j, json::json_pointer(), all);
    const json::json_pointer& at = all[rng() % all.size()];
    json& node = j[at];
    switch (rng() % 3) {
      case 0:
        if (!at.empty()) node = palette(rng);
        break;
      case 1:
        if (node.is_object() && !node.empty()) node.erase(node.begin());
        break;
      default:
        if (node.is_object()) node[kFields[rng() % std::size(kFields)]] = palette(rng);
        break;
    }
  }
  return j.dump();
}

// Byte-level damage: flipped, inserted (invalid UTF-8 and JSON's own punctuation among them) or
// cut bytes.
std::string mutate_bytes(std::string body, std::mt19937& rng) {
  static const char kBytes[] = {'\0', '\xff', '\xc0', '\xed', '{', '}', '[', '"', '\\', ',', ':'};
  for (int n = 1 + static_cast<int>(rng() % 4); n > 0 && !body.empty(); --n) {
    const size_t at = rng() % body.size();
    switch (rng() % 4) {
      case 0:
        body[at] = static_cast<char>(rng());
        break;
      case 1:
        body.insert(body.begin() + static_cast<std::ptrdiff_t>(at), kBytes[rng() % sizeof kBytes]);
        break;
      case 2:
        body.resize(at);
        break;
      default:
        body.insert(at, body.substr(at, rng() % 16));
        break;
    }
  }
  return body;
}

struct Route {
  const char* path;
  const char* seed;  // a valid body
};

const Route kRoutes[] = {
    {"/v1/generate",
     R"({"id": "a", "text": "teh speling", "timeout_ms": 900,
         "params": {"max_new_tokens": 8, "num_beams": 2, "stop": ["."], "return_scores": true}})"},
    {"/v1/generate",
     R"({"texts": ["a", "b"], "stream": false, "params": {"do_sample": true, "seed": 3}})"},
    {"/v2/models/speller/infer",
     R"({"id": "k", "inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
         "data": ["teh", "speling"]}], "parameters": {"max_new_tokens": 6, "timeout_ms": 500}})"},
    {"/v2/models/speller/versions/1/infer",
     R"({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1, 1], "data": [["a"]]}]})"},
    {"/v1/completions",
     R"({"model": "speller", "prompt": ["a", "b"], "max_tokens": 8, "temperature": 0.5,
         "top_p": 0.9, "seed": 3, "stop": ".", "n": 1, "logprobs": null})"},
    {"/v1/completions",
     R"({"prompt": "a", "stream": true, "stream_options": {"include_usage": true}})"},
    {"/v1/chat/completions",
     R"({"model": "speller", "max_tokens": 4, "messages": [{"role": "system", "content": "x"},
         {"role": "user", "content": [{"type": "text", "text": "teh"}]}]})"},
    {"/generate",
     R"({"inputs": "teh", "parameters": {"max_new_tokens": 7, "top_k": 5, "seed": 2,
         "details": true, "stop": ["."], "do_sample": true, "temperature": 0.7}})"},
    {"/generate_stream", R"({"inputs": "teh", "parameters": {"details": true}})"},
    {"/v2/repository/index", R"({"ready": true})"},
    {"/v2/repository/models/speller/load", R"({"parameters": {"config": "{}"}})"},
    {"/v2/repository/models/speller/unload", R"({"parameters": {"unload_dependents": false}})"},
};
// Without a control socket (as here) a repository route answers what it could parse 503.
bool is_repository(const char* path) {
  return std::string_view(path).starts_with("/v2/repository/");
}

TEST(HandlerBoundaryTest, AThrowingHandlerIsAnsweredCountedAndContained) {
  prometheus::Registry registry;
  metrics::FrontDoorMetrics counted(registry);
  bool answered = false;
  guard_handler(
      &counted, Door::kGrpc, "a test handler", [] { throw std::out_of_range("boom"); },
      [&] { answered = true; });
  EXPECT_TRUE(answered);
  EXPECT_EQ(counted.handler_exceptions(Door::kGrpc), 1);
  EXPECT_EQ(counted.handler_exceptions(Door::kHttp), 0);
  // An answer that throws too is contained; a handler that does not throw is not answered.
  guard_handler(
      &counted, Door::kHttp, "another", [] { throw 7; }, [] { throw std::bad_alloc(); });
  EXPECT_EQ(counted.handler_exceptions(Door::kHttp), 1);
  answered = false;
  guard_handler(
      nullptr, Door::kHttp, "fine", [] {}, [&] { answered = true; });
  EXPECT_FALSE(answered);
}

TEST(HttpFrontDoorAbuseTest, EveryPostRouteAnswersMutatedBodiesAndKeepsServing) {
  zmq::context_t context;
  TestGateway gateway;
  prometheus::Registry registry;
  metrics::FrontDoorMetrics counted(registry);
  HttpFrontDoor door(context, gateway.submissions(),
                     HttpOptions{.host = "127.0.0.1",
                                 .port = 0,
                                 .model_name = "speller",
                                 .max_body_bytes = 1 << 16,
                                 .default_timeout = std::chrono::milliseconds(2000),
                                 .metrics = &counted},
                     [](const std::string&) { return true; });
  httplib::Client http("127.0.0.1", door.port());
  http.set_read_timeout(10, 0);
  std::mt19937 rng(kSeed);
  for (const Route& route : kRoutes) {
    const json seed = json::parse(route.seed);
    std::map<int, int> statuses;
    for (int i = 0; i < kPerRoute; ++i) {
      const std::string body = i % 3 == 2 ? mutate_bytes(seed.dump(), rng) : mutate_json(seed, rng);
      auto res = http.Post(route.path, body, "application/json");
      ASSERT_TRUE(res) << route.path << " got no answer to " << body;
      EXPECT_NE(res->status, 500) << route.path << " " << body << " -> " << res->body;
      ++statuses[res->status];
    }
    // The mutations reach past the first check: some are still served, some refused.
    if (!is_repository(route.path)) {
      EXPECT_GE(statuses.size(), 2u) << route.path;
    }
    auto live = http.Get("/v2/health/live");
    ASSERT_TRUE(live) << "the door stopped serving after " << route.path;
    EXPECT_EQ(live->status, 200);
  }
  EXPECT_EQ(counted.handler_exceptions(Door::kHttp), 0);
}

// The gateway's loop for the gRPC door: every request decoded as the gateway does and answered,
// a refused one with its error, a streamed one with a partial first. With `reply_bytes`, every
// reply's text is that long (the client's window fills sooner).
class EchoLoop {
 public:
  explicit EchoLoop(GrpcFrontDoor& door, size_t reply_bytes = 0)
      : door_(door), reply_bytes_(reply_bytes), thread_([this] { run(); }) {}
  ~EchoLoop() {
    stop_ = true;
    thread_.join();
  }
  size_t requests() const { return requests_; }

 private:
  void run() {
    while (!stop_) {
      pollfd fd{door_.wake_fd(), POLLIN, 0};
      if (::poll(&fd, 1, 10) <= 0) continue;
      std::vector<std::pair<ReplySink, protocol::Reply>> replies;
      door_.serve([&](Submission&& s) {
        ++requests_;
        for (protocol::Reply& reply : answer(s)) replies.emplace_back(s.sink, std::move(reply));
      });
      for (auto& [sink, reply] : replies) sink(std::move(reply));
    }
  }
  std::vector<protocol::Reply> answer(const Submission& s) const {
    if (const auto* rejected = std::get_if<protocol::RejectedRequest>(&s.request))
      return {protocol::error_reply(*rejected)};
    const auto& request = std::get<protocol::Request>(s.request);
    if (request.op == protocol::Op::kCancel) return {};
    protocol::Reply ok;
    ok.id = request.id.value_or("");
    ok.batch_form = request.batch_form;
    ok.texts = request.texts;
    if (reply_bytes_ > 0) {
      for (std::string& text : ok.texts) text.assign(reply_bytes_, 'r');
    }
    std::vector<protocol::Reply> out;
    if (request.stream) {
      protocol::Reply partial = ok;
      partial.partial = true;
      out.push_back(std::move(partial));
    }
    out.push_back(std::move(ok));
    return out;
  }

  GrpcFrontDoor& door_;
  const size_t reply_bytes_;
  std::atomic<bool> stop_ = false;
  std::atomic<size_t> requests_ = 0;
  std::thread thread_;
};

// A valid request with fields changed to what a hostile client might send, about one in two
// still served. Protobuf's string fields stay UTF-8 (gRPC refuses a message otherwise before any
// handler sees it); the bytes of texts need not be.
inference::ModelInferRequest mutated_infer(std::mt19937& rng) {
  static const std::string kNames[] = {"nope", std::string(300, 'm'), "\u00e9", "alpha/1"};
  static const std::string kVersions[] = {"0", "-1", "abc", "99999999999", "3", " 1"};
  static const std::string kTypes[] = {"BYTES", "FP32", "", "bytes"};
  static const int64_t kDims[] = {-1, 0, 1, 2, 3, INT64_MAX, INT64_MIN};
  inference::ModelInferRequest r;
  r.set_model_name(rng() % 6 ? (rng() % 2 ? "beta" : "") : kNames[rng() % std::size(kNames)]);
  r.set_model_version(rng() % 6 ? (rng() % 2 ? "1" : "") : kVersions[rng() % std::size(kVersions)]);
  r.set_id(rng() % 6 ? "id" : std::string(1 + rng() % 300, 'i'));
  for (int i = rng() % 6 ? 0 : static_cast<int>(rng() % 3); i >= 0; --i) {  // usually one
    auto* input = r.add_inputs();
    input->set_name("text");
    input->set_datatype(rng() % 4 ? "BYTES" : kTypes[rng() % std::size(kTypes)]);
    for (int d = rng() % 5 ? 1 : static_cast<int>(rng() % 4); d > 0; --d)
      input->add_shape(rng() % 5 ? 1 : kDims[rng() % std::size(kDims)]);
    input->mutable_contents()->add_bytes_contents(rng() % 5 ? "teh" : "\xc0\xff");
    if (rng() % 6 == 0) input->mutable_contents()->add_fp32_contents(1.5f);
  }
  if (rng() % 5 == 0) {
    std::string raw(rng() % 12, '\0');
    for (char& c : raw) c = static_cast<char>(rng());
    r.add_raw_input_contents(raw);
  }
  const auto& options = protocol::generate_options();
  for (int n = static_cast<int>(rng() % 3); n > 0; --n) {
    const std::string name = rng() % 4 ? std::string(options[rng() % options.size()].name)
                                       : std::string(rng() % 2 ? "timeout_ms" : "model");
    auto& p = (*r.mutable_parameters())[name];
    switch (rng() % 6) {
      case 0:
        p.set_bool_param(rng() % 2 == 0);
        break;
      case 1:
        p.set_int64_param(rng() % 2 ? -1 : INT64_MAX);
        break;
      case 2:
        p.set_string_param(rng() % 2 ? "7" : "");
        break;
      case 3:
        p.set_double_param(rng() % 2 ? 0.5 : std::numeric_limits<double>::quiet_NaN());
        break;
      case 4:
        p.set_uint64_param(rng() % 2 ? 3 : UINT64_MAX);
        break;
      default:
        break;  // no value at all
    }
  }
  if (rng() % 4 == 0) {  // and byte-level damage to the message itself
    std::string bytes = mutate_bytes(r.SerializeAsString(), rng);
    inference::ModelInferRequest damaged;
    if (damaged.ParseFromString(bytes)) return damaged;
  }
  return r;
}

class GrpcFrontDoorAbuseTest : public ::testing::Test {
 protected:
  void start(size_t max_queued_responses, const grpc::ChannelArguments& args = {},
             size_t reply_bytes = 0) {
    // The damaged messages' parse failures are expected: not logged.
    google::protobuf::SetLogHandler(nullptr);
    GrpcOptions options;
    options.port = 0;
    options.max_queued_responses = max_queued_responses;
    options.metrics = &counted_;
    door_ =
        std::make_unique<GrpcFrontDoor>(options, catalog_, [](const std::string&) { return true; });
    loop_ = std::make_unique<EchoLoop>(*door_, reply_bytes);
    stub_ = inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(door_->port()), grpc::InsecureChannelCredentials(), args));
  }
  ~GrpcFrontDoorAbuseTest() override {
    loop_.reset();
    door_.reset();
  }
  static std::unique_ptr<grpc::ClientContext> context() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return c;
  }

  prometheus::Registry registry_;
  metrics::FrontDoorMetrics counted_{registry_};
  SharedCatalog catalog_{config::ModelCatalog(
      {{"alpha", 1, "r/alpha/1"}, {"beta", 1, "r/beta/1"}, {"beta", 2, "r/beta/2"}}, "alpha")};
  std::unique_ptr<GrpcFrontDoor> door_;
  std::unique_ptr<EchoLoop> loop_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(GrpcFrontDoorAbuseTest, EveryCallAnswersMutatedMessagesAndKeepsServing) {
  start(1024);
  std::mt19937 rng(kSeed);
  std::map<grpc::StatusCode, int> codes;
  for (int i = 0; i < kGrpcCalls; ++i) {
    const inference::ModelInferRequest request = mutated_infer(rng);
    inference::ModelInferResponse response;
    const grpc::Status status = stub_->ModelInfer(context().get(), request, &response);
    EXPECT_NE(status.error_code(), grpc::StatusCode::INTERNAL) << status.error_message();
    EXPECT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << "not answered";
    ++codes[status.error_code()];
    inference::ModelMetadataRequest metadata;
    metadata.set_name(request.model_name());
    metadata.set_version(request.model_version());
    inference::ModelMetadataResponse described;
    EXPECT_NE(stub_->ModelMetadata(context().get(), metadata, &described).error_code(),
              grpc::StatusCode::INTERNAL);
  }
  EXPECT_GT(codes[grpc::StatusCode::OK], 0);
  EXPECT_GT(codes[grpc::StatusCode::INVALID_ARGUMENT], 0);
  // One stream carries them all: each request gets exactly one final response.
  auto c = context();
  auto stream = stub_->ModelStreamInfer(c.get());
  const int streamed = kGrpcCalls / 2;
  for (int i = 0; i < streamed; ++i) ASSERT_TRUE(stream->Write(mutated_infer(rng)));
  stream->WritesDone();
  int finals = 0;
  inference::ModelStreamInferResponse response;
  while (stream->Read(&response)) {
    const auto& p = response.infer_response().parameters();
    const auto it = p.find(kFinalResponse);
    finals += it != p.end() && it->second.bool_param();
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(finals, streamed);
  EXPECT_EQ(counted_.handler_exceptions(Door::kGrpc), 0);
}

TEST_F(GrpcFrontDoorAbuseTest, AStreamWhoseClientDoesNotReadIsFinishedResourceExhausted) {
  // A small receive window and no window growth: the client's unread responses back up at the
  // door soon.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  start(8, args, 4096);
  inference::ModelInferRequest request;
  request.set_model_name("alpha");
  auto* input = request.add_inputs();
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents("a");
  auto c = context();
  auto stream = stub_->ModelStreamInfer(c.get());
  constexpr int kSent = 1000;  // small requests, 8 MB of responses: far past any window
  int sent = 0;
  while (sent < kSent && stream->Write(request)) ++sent;
  // Not reading until the gateway's loop has stopped getting requests: the door has taken what
  // it will (none once it gave up) and their responses have backed up.
  size_t taken = 0;
  for (int i = 0; i < 50 && (taken == 0 || taken != loop_->requests()); ++i) {
    taken = loop_->requests();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  inference::ModelStreamInferResponse response;
  int read = 0;
  while (stream->Read(&response)) ++read;
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_NE(status.error_message().find("did not read its responses: 8 were queued"),
            std::string::npos)
      << status.error_message();
  EXPECT_LT(read, 2 * sent) << "the call ended before every response was written";
  // The door serves on.
  inference::ModelInferResponse answered;
  EXPECT_TRUE(stub_->ModelInfer(context().get(), request, &answered).ok());
}

}  // namespace
}  // namespace seqpipe::gateway
