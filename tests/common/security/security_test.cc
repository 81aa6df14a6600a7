// CurveZMQ over real tcp sockets: a client whose key is in the hub's allow list is served; one
// with another key, or without CurveZMQ, gets nothing through and is reported as refused. Key
// files: written with the secret one at mode 0600, read back, refused when others may read it.
#include "seqpipe/security/security.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <mutex>

#include "seqpipe/transport/transport.h"

namespace seqpipe::security {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/seqpipe-security-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string path;
};

TEST(KeyFilesTest, WrittenReadBackAndTheSecretOneKeptPrivate) {
  TempDir dir;
  const KeyPair keys = generate_key_pair();
  ASSERT_EQ(keys.public_key.size(), 40u);
  const std::string path = dir.path + "/worker";
  write_key_files(path, keys);
  EXPECT_EQ(fs::status(path + "_secret").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  const KeyPair read = read_secret_key_file(path + "_secret");
  EXPECT_EQ(read.public_key, keys.public_key);
  EXPECT_EQ(read.secret_key, keys.secret_key);
  EXPECT_EQ(read_public_key_file(path), keys.public_key);
  EXPECT_EQ(read_public_key_file(path + "_secret"), keys.public_key);
  EXPECT_THROW(write_key_files(path, generate_key_pair()), std::runtime_error) << "overwrote";

  ::chmod((path + "_secret").c_str(), 0640);
  try {
    read_secret_key_file(path + "_secret");
    ADD_FAILURE() << "a group-readable secret key file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("chmod 600"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_public_key_file(dir.path + "/missing"), std::runtime_error);
}

TEST(KeyFilesTest, AllowListTakesThePublicFilesOfADirectory) {
  TempDir dir;
  const KeyPair a = generate_key_pair(), b = generate_key_pair();
  write_key_files(dir.path + "/a", a);
  write_key_files(dir.path + "/b", b);
  EXPECT_EQ(read_allow_list(dir.path), (std::set<std::string>{a.public_key, b.public_key}));
  TempDir empty;
  EXPECT_THROW(read_allow_list(empty.path), std::runtime_error);
  EXPECT_THROW(read_allow_list(empty.path + "/nope"), std::runtime_error);
}

TEST(ConfigKeysTest, ClientKeysComeFromTheSecurityKeysFiles) {
  TempDir dir;
  const KeyPair hub = generate_key_pair(), worker = generate_key_pair();
  write_key_files(dir.path + "/hub", hub);
  write_key_files(dir.path + "/worker", worker);
  EXPECT_FALSE(client_keys({}).client()) << "no server_key: plain text";

  config::SecurityConfig security;
  security.server_key = dir.path + "/hub";
  security.client_key = dir.path + "/worker";
  const transport::CurveKeys keys = client_keys(security);
  EXPECT_EQ(keys.server_public_key, hub.public_key);
  EXPECT_EQ(keys.public_key, worker.public_key);
  EXPECT_EQ(keys.secret_key, worker.secret_key);

  ::chmod((dir.path + "/worker_secret").c_str(), 0644);
  try {
    client_keys(security);
    ADD_FAILURE() << "a world-readable secret key file was accepted";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("security.client_key: " + dir.path + "/worker_secret"),
              std::string::npos)
        << e.what();
  }
  security.client_key = dir.path + "/nobody";
  EXPECT_THROW(client_keys(security), config::ConfigError);
}

// A hub's ROUTER behind CurveZMQ and its ZAP handler, and clients trying to reach it.
class CurveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    allowed_client = generate_key_pair();
    zap =
        std::make_unique<ZapHandler>(hub_context, std::set<std::string>{allowed_client.public_key},
                                     [this](const std::string& key, const std::string&) {
                                       std::lock_guard lock(mutex);
                                       refused.push_back(key);
                                     });
    transport::SocketOptions options;
    options.curve = curve_server(server);
    hub = std::make_unique<transport::Socket>(hub_context, zmq::socket_type::router, options);
    endpoint = hub->bind("tcp://127.0.0.1:0");
  }
  // Sends "hello" from a DEALER with `curve` keys and returns whether the hub got it.
  bool reaches_hub(const transport::CurveKeys& curve) {
    transport::SocketOptions options;
    options.curve = curve;
    transport::Socket client(client_context, zmq::socket_type::dealer, options);
    client.connect(endpoint);
    if (!client.send({"hello"})) return false;
    auto got = hub->recv(milliseconds(1500));
    if (!got) return false;
    EXPECT_EQ(got->back(), "hello");
    EXPECT_TRUE(hub->send({got->front(), "world"}));
    auto reply = client.recv(milliseconds(5000));
    return reply && reply->back() == "world";
  }
  std::vector<std::string> refused_keys() {
    std::lock_guard lock(mutex);
    return refused;
  }

  zmq::context_t hub_context, client_context;
  KeyPair server = generate_key_pair(), allowed_client;
  std::mutex mutex;
  std::vector<std::string> refused;
  std::unique_ptr<ZapHandler> zap;
  std::unique_ptr<transport::Socket> hub;
  std::string endpoint;
};

TEST_F(CurveTest, AnAllowedClientIsServed) {
  EXPECT_TRUE(reaches_hub(curve_client(allowed_client, server.public_key)));
  EXPECT_TRUE(refused_keys().empty());
}

TEST_F(CurveTest, AClientWithAnotherKeyGetsNothingAndIsCounted) {
  const KeyPair stranger = generate_key_pair();
  EXPECT_FALSE(reaches_hub(curve_client(stranger, server.public_key)));
  const auto refusals = refused_keys();
  ASSERT_FALSE(refusals.empty());
  EXPECT_EQ(refusals.front(), stranger.public_key);
}

TEST_F(CurveTest, APlainTextClientGetsNothing) {
  EXPECT_FALSE(reaches_hub({}));
  // Then an allowed client still is served: the hub is unharmed.
  EXPECT_TRUE(reaches_hub(curve_client(allowed_client, server.public_key)));
}

}  // namespace
}  // namespace seqpipe::security
