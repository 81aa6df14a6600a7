// The socket layer over real sockets: ephemeral tcp ports read back, ipc directories created,
// oversized frames refused, unknown ROUTER peers reported. Synchronised by polling, no sleeps.
#include "seqpipe/transport/transport.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

namespace seqpipe::transport {
namespace {

using std::chrono::milliseconds;

TEST(Transport, TcpEphemeralPortRoundTrip) {
  zmq::context_t ctx;
  Socket router(ctx, zmq::socket_type::router);
  const std::string endpoint = router.bind("tcp://127.0.0.1:0");
  ASSERT_NE(endpoint.find("tcp://127.0.0.1:"), std::string::npos);
  EXPECT_EQ(endpoint.find(":0", endpoint.size() - 2), std::string::npos)
      << "the real port comes back: " << endpoint;
  SocketOptions with_id;
  with_id.routing_id = std::string("w\0001", 3);
  Socket dealer(ctx, zmq::socket_type::dealer, with_id);
  dealer.connect(endpoint);
  ASSERT_TRUE(dealer.send({"", "hello"}));
  auto got = router.recv(milliseconds(5000));
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0], std::string("w\0"
                                   "1",
                                   3))
      << "routing ids are bytes";
  EXPECT_EQ((*got)[2], "hello");
  ASSERT_TRUE(router.send({(*got)[0], "", "world"}));
  auto reply = dealer.recv(milliseconds(5000));
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->back(), "world");
}

TEST(Transport, IpcBindCreatesTheDirectory) {
  char tmpl[] = "/tmp/seqpipe-transport-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/run/sub";
  zmq::context_t ctx;
  {
    Socket pull(ctx, zmq::socket_type::pull);
    const std::string ep = pull.bind("ipc://" + dir + "/in.sock");
    EXPECT_TRUE(std::filesystem::is_directory(dir));
    Socket push(ctx, zmq::socket_type::push);
    push.connect(ep);
    ASSERT_TRUE(push.send({"a", "b"}));
    auto got = pull.recv(milliseconds(5000));
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(*got, (Frames{"a", "b"}));
  }
  std::filesystem::remove_all(tmpl);
}

TEST(Transport, OversizedFrameIsRefusedAndTheSocketKeepsServing) {
  zmq::context_t ctx;
  SocketOptions small;
  small.max_message_bytes = 1024;
  Socket router(ctx, zmq::socket_type::router, small);
  const std::string ep = router.bind("tcp://127.0.0.1:0");
  Socket hostile(ctx, zmq::socket_type::dealer);
  hostile.connect(ep);
  ASSERT_TRUE(hostile.send({"", std::string(4096, 'x')}));
  EXPECT_FALSE(router.recv(milliseconds(300)).has_value())
      << "a frame over ZMQ_MAXMSGSIZE never arrives";
  Socket good(ctx, zmq::socket_type::dealer);
  good.connect(ep);
  ASSERT_TRUE(good.send({"", "small"}));
  auto got = router.recv(milliseconds(5000));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->back(), "small");
}

TEST(Transport, RouterReportsAnUnknownPeerInsteadOfDroppingSilently) {
  zmq::context_t ctx;
  Socket router(ctx, zmq::socket_type::router);
  router.bind("tcp://127.0.0.1:0");
  EXPECT_FALSE(router.send({"nobody", "", "x"}));
}

TEST(Transport, BindErrorNamesTheEndpoint) {
  zmq::context_t ctx;
  Socket s(ctx, zmq::socket_type::pull);
  try {
    s.bind("tcp://not-an-address:1");
    FAIL() << "bind should fail";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tcp://not-an-address:1"), std::string::npos) << e.what();
  }
}

TEST(Transport, ABusyEndpointNamedByAKeyIsAnEndpointErrorNamingTheKey) {
  zmq::context_t ctx;
  Socket first(ctx, zmq::socket_type::pull), second(ctx, zmq::socket_type::pull);
  const std::string endpoint = first.bind("tcp://127.0.0.1:0");
  try {
    second.bind(endpoint, "gateway.client_endpoint");
    FAIL() << "bind should fail";
  } catch (const EndpointError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("gateway.client_endpoint: " + endpoint + " ", 0), 0u)
        << e.what();
  }
}

TEST(Transport, PollerSaysWhichSocketIsReadable) {
  zmq::context_t ctx;
  Socket a(ctx, zmq::socket_type::pull), b(ctx, zmq::socket_type::pull);
  const std::string ea = a.bind("inproc://a"), eb = b.bind("inproc://b");
  Socket pb(ctx, zmq::socket_type::push);
  pb.connect(eb);
  Poller poller;
  const size_t ia = poller.add(a), ib = poller.add(b);
  EXPECT_EQ(poller.poll(milliseconds(0)), 0);
  ASSERT_TRUE(pb.send({"x"}));
  ASSERT_EQ(poller.poll(milliseconds(5000)), 1);
  EXPECT_FALSE(poller.readable(ia));
  EXPECT_TRUE(poller.readable(ib));
  EXPECT_TRUE(b.try_recv().has_value());
  EXPECT_FALSE(b.try_recv().has_value());
}

}  // namespace
}  // namespace seqpipe::transport
