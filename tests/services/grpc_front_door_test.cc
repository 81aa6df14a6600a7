// The gRPC front door routing by model, served on a real port to gRPC's own client: a call's
// model_name and model_version resolve in the gateway's catalog (unknown: NOT_FOUND with the
// catalog's message, at once), the request goes in naming that model, and its response names the
// model and the version that ran it; ModelReady and ModelMetadata answer per model version and
// follow the catalog as versions load and unload. This test plays the gateway's loop: it takes
// the door's requests (the wake fd, serve) and answers each the way the gateway routes it,
// resolving its model in the same catalog. grpc_test.py and repository_test.py run it whole.
#include "gateway/grpc_front_door.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "grpc_predict_v2.grpc.pb.h"

namespace seqpipe::gateway {
namespace {

using config::ModelCatalog;
using config::ModelVersion;

const std::vector<ModelVersion> kRepository = {
    {"alpha", 1, "r/alpha/1"}, {"beta", 1, "r/beta/1"}, {"beta", 2, "r/beta/2"}};

// The gateway's loop, for the door: each request is answered ok, its one text being the key of
// the version the gateway resolves it to ("name/version", as Gateway::on_client does).
class Loop {
 public:
  Loop(GrpcFrontDoor& door, const SharedCatalog& catalog) : door_(door), catalog_(catalog) {
    thread_ = std::thread([this] { run(); });
  }
  ~Loop() {
    stop_ = true;
    thread_.join();
  }
  // Takes nothing from the door until resumed; returns once the loop holds.
  void pause() {
    paused_ = true;
    while (!holding_) std::this_thread::yield();
  }
  void resume() { paused_ = false; }
  std::vector<protocol::Request> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void run() {
    while (!stop_) {
      holding_ = paused_.load();
      pollfd fd{door_.wake_fd(), POLLIN, 0};
      if (holding_ || ::poll(&fd, 1, 10) <= 0) {
        if (holding_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      std::vector<std::pair<ReplySink, protocol::Reply>> replies;
      door_.serve([&](Submission&& s) { replies.emplace_back(std::move(s.sink), answer(s)); });
      for (auto& [sink, reply] : replies) sink(std::move(reply));
    }
  }
  protocol::Reply answer(const Submission& s) {
    const auto& request = std::get<protocol::Request>(s.request);
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(request);
    }
    const auto key = catalog_.get()->resolve(request.model, request.version);
    if (const auto* error = std::get_if<protocol::Error>(&key))
      return protocol::error_reply(*request.id, *error);
    protocol::Reply ok;
    ok.id = *request.id;
    ok.texts = {std::get<std::string>(key)};
    return ok;
  }

  GrpcFrontDoor& door_;
  const SharedCatalog& catalog_;
  std::atomic<bool> stop_ = false, paused_ = false, holding_ = false;
  std::mutex mutex_;
  std::vector<protocol::Request> requests_;
  std::thread thread_;
};

inference::ModelInferRequest infer(const std::string& model, const std::string& version = "") {
  inference::ModelInferRequest r;
  r.set_model_name(model);
  r.set_model_version(version);
  r.set_id(model + "/" + version);
  auto* input = r.add_inputs();
  input->set_name("text");
  input->set_datatype("BYTES");
  input->add_shape(1);
  input->mutable_contents()->add_bytes_contents("hello");
  return r;
}

class GrpcFrontDoorTest : public ::testing::Test {
 protected:
  explicit GrpcFrontDoorTest(ModelCatalog catalog = ModelCatalog(kRepository, "alpha"))
      : catalog_(std::move(catalog)) {
    GrpcOptions options;
    options.port = 0;
    door_ = std::make_unique<GrpcFrontDoor>(options, catalog_, [this](const std::string& key) {
      std::lock_guard lock(mutex_);
      asked_.insert(key);
      return key == "" || key == "beta/2";
    });
    loop_ = std::make_unique<Loop>(*door_, catalog_);
    stub_ = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(door_->port()), grpc::InsecureChannelCredentials()));
  }
  ~GrpcFrontDoorTest() override {
    loop_.reset();  // the door is destroyed on the thread that played the gateway's loop
    door_.reset();
  }

  static std::unique_ptr<grpc::ClientContext> context() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  }
  grpc::Status call(const inference::ModelInferRequest& request,
                    inference::ModelInferResponse& response) {
    return stub_->ModelInfer(context().get(), request, &response);
  }
  // The response's model, its version and its text (the key the gateway ran it on).
  std::vector<std::string> served(const inference::ModelInferRequest& request) {
    inference::ModelInferResponse response;
    const grpc::Status status = call(request, response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok()) return {};
    return {response.model_name(), response.model_version(),
            response.outputs(0).contents().bytes_contents(0)};
  }
  grpc::Status refused(const inference::ModelInferRequest& request) {
    inference::ModelInferResponse response;
    return call(request, response);
  }
  std::string not_found(const std::string& name, std::optional<uint32_t> version) {
    return "not_found: " + std::get<protocol::Error>(catalog_.get()->find(name, version)).message;
  }
  // ModelReady's answer, and which readiness it asked for (a model version's key; "": all).
  std::pair<bool, std::set<std::string>> ready(const std::string& name,
                                               const std::string& version = "") {
    {
      std::lock_guard lock(mutex_);
      asked_.clear();
    }
    inference::ModelReadyRequest request;
    request.set_name(name);
    request.set_version(version);
    inference::ModelReadyResponse response;
    const grpc::Status status = stub_->ModelReady(context().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::lock_guard lock(mutex_);
    return {response.ready(), asked_};
  }
  grpc::Status metadata(const std::string& name, const std::string& version,
                        inference::ModelMetadataResponse& response) {
    inference::ModelMetadataRequest request;
    request.set_name(name);
    request.set_version(version);
    return stub_->ModelMetadata(context().get(), request, &response);
  }
  std::vector<std::string> versions(const std::string& name, const std::string& version = "") {
    inference::ModelMetadataResponse response;
    const grpc::Status status = metadata(name, version, response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {response.versions().begin(), response.versions().end()};
  }

  SharedCatalog catalog_;
  std::mutex mutex_;
  std::set<std::string> asked_;
  std::unique_ptr<GrpcFrontDoor> door_;
  std::unique_ptr<Loop> loop_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(GrpcFrontDoorTest, InferRunsTheModelItNamesAndSaysWhichVersion) {
  using Row = std::vector<std::string>;
  EXPECT_EQ(served(infer("beta")), (Row{"beta", "2", "beta/2"}));  // the highest version
  EXPECT_EQ(served(infer("beta", "1")), (Row{"beta", "1", "beta/1"}));
  EXPECT_EQ(served(infer("alpha")), (Row{"alpha", "1", "alpha/1"}));
  EXPECT_EQ(served(infer("")), (Row{"alpha", "1", "alpha/1"}));  // no name: the default model
  // The requests went in naming the model, and the version only where the call named one.
  const auto requests = loop_->requests();
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].model, "beta");
  EXPECT_EQ(requests[0].version, std::nullopt);
  EXPECT_EQ(requests[1].version, 1u);
  EXPECT_EQ(requests[3].model, std::nullopt);
}

TEST_F(GrpcFrontDoorTest, AnUnknownModelOrVersionIsNotFoundAtOnceWithTheCatalogsMessage) {
  grpc::Status status = refused(infer("gamma"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), not_found("gamma", std::nullopt));
  status = refused(infer("beta", "3"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), not_found("beta", 3u));
  EXPECT_EQ(refused(infer("beta", "latest")).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(loop_->requests().empty());  // none of them reached the gateway
}

// The version a response names is the one the gateway ran it on: resolved on the gateway's
// thread as the request goes in, so a version loaded after the call came in and before the
// gateway took it is the one that answers, and the one named.
TEST_F(GrpcFrontDoorTest, TheResponseNamesTheVersionOfTheMomentTheGatewayTookIt) {
  loop_->pause();
  inference::ModelInferResponse response;
  grpc::Status status;
  std::thread caller([&] { status = call(infer("beta"), response); });
  pollfd fd{door_->wake_fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&fd, 1, 10000), 1);  // the door handed the call over
  auto loaded = kRepository;
  loaded.push_back({"beta", 3, "r/beta/3"});
  catalog_.set(ModelCatalog(loaded, "alpha"));
  loop_->resume();
  caller.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.model_version(), "3");
  EXPECT_EQ(response.outputs(0).contents().bytes_contents(0), "beta/3");
}

TEST_F(GrpcFrontDoorTest, ReadinessAndMetadataArePerModelVersionAndFollowTheCatalog) {
  using Keys = std::set<std::string>;
  EXPECT_EQ(ready("beta"), std::make_pair(true, Keys{"beta/2"}));
  EXPECT_EQ(ready("beta", "1"), std::make_pair(false, Keys{"beta/1"}));
  EXPECT_EQ(ready("alpha"), std::make_pair(false, Keys{"alpha/1"}));
  inference::ModelReadyRequest unknown;
  unknown.set_name("gamma");
  inference::ModelReadyResponse answer;
  EXPECT_EQ(stub_->ModelReady(context().get(), unknown, &answer).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(versions("beta"), (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(versions("beta", "1"), (std::vector<std::string>{"1"}));
  EXPECT_EQ(versions("alpha"), (std::vector<std::string>{"1"}));

  // beta 1 unloaded, gamma loaded, live.
  catalog_.set(ModelCatalog({kRepository[0], kRepository[2], {"gamma", 4, "r/gamma/4"}}, "alpha"));
  EXPECT_EQ(versions("beta"), (std::vector<std::string>{"2"}));
  inference::ModelMetadataResponse response;
  const grpc::Status gone = metadata("beta", "1", response);
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(gone.error_message(), not_found("beta", 1u));
  EXPECT_EQ(refused(infer("beta", "1")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ready("gamma"), std::make_pair(false, Keys{"gamma/4"}));
  EXPECT_EQ(served(infer("gamma")), (std::vector<std::string>{"gamma", "4", "gamma/4"}));
}

TEST_F(GrpcFrontDoorTest, EachStreamedRequestRunsItsModel) {
  auto c = context();
  auto stream = stub_->ModelStreamInfer(c.get());
  for (const auto& r : {infer("alpha"), infer("beta", "1"), infer("gamma")}) stream->Write(r);
  stream->WritesDone();
  std::map<std::string, inference::ModelStreamInferResponse> got;  // by request id
  inference::ModelStreamInferResponse response;
  while (stream->Read(&response)) got[response.infer_response().id()] = response;
  EXPECT_TRUE(stream->Finish().ok());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got["alpha/"].error_message(), "");
  EXPECT_EQ(got["alpha/"].infer_response().model_name(), "alpha");
  EXPECT_EQ(got["alpha/"].infer_response().model_version(), "1");
  EXPECT_EQ(got["beta/1"].infer_response().model_name(), "beta");
  EXPECT_EQ(got["beta/1"].infer_response().model_version(), "1");
  EXPECT_EQ(got["gamma/"].error_message(), not_found("gamma", std::nullopt));
  EXPECT_EQ(got["gamma/"].infer_response().model_name(), "gamma");
}

// Without a repository the door serves its one model under its name, as it always has.
class GrpcFrontDoorSingleModelTest : public GrpcFrontDoorTest {
 protected:
  GrpcFrontDoorSingleModelTest()
      : GrpcFrontDoorTest(ModelCatalog({{"m", 1, "models/m"}}, "m", /*single=*/true)) {}
};

TEST_F(GrpcFrontDoorSingleModelTest, ItsOneModelAnswersToItsNameOnly) {
  EXPECT_EQ(served(infer("m")), (std::vector<std::string>{"m", "1", ""}));
  const grpc::Status status = refused(infer("nope"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "unknown model 'nope': this gateway serves 'm'");
  EXPECT_EQ(refused(infer("")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ready("m"), std::make_pair(true, std::set<std::string>{""}));  // the pipeline's
  EXPECT_EQ(versions("m"), (std::vector<std::string>{"1"}));
}

}  // namespace
}  // namespace seqpipe::gateway
