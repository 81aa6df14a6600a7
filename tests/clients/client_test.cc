// The C++ client's gateway failover over real sockets: test gateways are ROUTER sockets that
// answer (or stay silent) as the test says. A request unanswered for retry_after goes, with the
// same id, to the next gateway; the first reply wins and a second is dropped; no retry past the
// attempts or the request's deadline.
#include "seqpipe/client.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

#include "seqpipe/transport/transport.h"

namespace seqpipe::client {
namespace {

using std::chrono::milliseconds;

// One test gateway: receives requests and answers them when told to.
struct TestGateway {
  explicit TestGateway(zmq::context_t& context, const std::string& bind = "tcp://127.0.0.1:0")
      : socket(context, zmq::socket_type::router) {
    endpoint = socket.bind(bind);
  }
  // The next request that arrives within `wait`: (routing id, request id), or nullopt.
  std::optional<std::pair<std::string, std::string>> next_request(milliseconds wait) {
    auto frames = socket.recv(wait);
    if (!frames) return std::nullopt;
    const std::string& body = frames->back();
    auto decoded = protocol::decode_request(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size()),
        protocol::Limits{});
    auto* request = std::get_if<protocol::Request>(&decoded);
    if (request == nullptr) return std::nullopt;
    return std::make_pair(frames->front(), request->id.value_or(""));
  }
  void answer(const std::string& routing_id, const std::string& id, const std::string& text,
              bool partial = false) {
    protocol::Reply reply;
    reply.id = id;
    reply.texts = {text};
    reply.partial = partial;
    ASSERT_TRUE(socket.send({routing_id, "", protocol::encode_reply(reply)}));
  }
  transport::Socket socket;
  std::string endpoint;
};

ClientOptions retrying(milliseconds after, int attempts) {
  ClientOptions options;
  options.retry_after = after;
  options.max_attempts = attempts;
  return options;
}

protocol::Request request(std::string text) {
  protocol::Request r;
  r.texts = {std::move(text)};
  return r;
}

std::string text_of(const std::variant<protocol::Reply, protocol::Error>& answer) {
  if (const auto* e = std::get_if<protocol::Error>(&answer)) return "error: " + e->message;
  return std::get<protocol::Reply>(answer).texts.at(0);
}

TEST(ClientTest, SplitsAListOfEndpoints) {
  EXPECT_EQ(split_endpoints("tcp://a:1,ipc:///x/y.sock"),
            (std::vector<std::string>{"tcp://a:1", "ipc:///x/y.sock"}));
  EXPECT_EQ(split_endpoints("tcp://a:1"), std::vector<std::string>{"tcp://a:1"});
  EXPECT_EQ(split_endpoints(",tcp://a:1,"), std::vector<std::string>{"tcp://a:1"});
  EXPECT_THROW(Client(""), std::invalid_argument);
}

TEST(ClientTest, AnUnansweredRequestGoesWithItsIdToTheNextGatewayWhichThenTakesNewOnes) {
  zmq::context_t context;
  TestGateway silent(context), live(context);
  Client client(silent.endpoint + "," + live.endpoint, retrying(milliseconds(100), 3));
  protocol::Request r = request("one");
  r.id = "r1";
  ASSERT_TRUE(client.submit(r));
  ASSERT_TRUE(silent.next_request(milliseconds(5000)));  // reached the first, which is dead
  std::optional<std::pair<std::string, std::string>> retried;
  while (!retried) {
    EXPECT_FALSE(client.receive(milliseconds(20)));  // drives the retry timer
    retried = live.next_request(milliseconds(0));
  }
  EXPECT_EQ(retried->second, "r1") << "the same id";
  live.answer(retried->first, "r1", "from live");
  EXPECT_EQ(text_of(client.receive("r1", milliseconds(5000))), "from live");

  // The client moved on: the next request goes straight to the live gateway.
  protocol::Request r2 = request("two");
  r2.id = "r2";
  ASSERT_TRUE(client.submit(r2));
  auto second = live.next_request(milliseconds(5000));
  ASSERT_TRUE(second);
  EXPECT_EQ(second->second, "r2");
  EXPECT_FALSE(silent.next_request(milliseconds(0)));
}

TEST(ClientTest, AGatewayThatDiesHandsItsRequestsToTheNextAtOnce) {
  zmq::context_t context;
  auto dies = std::make_unique<TestGateway>(context);
  TestGateway live(context);
  // No timer retry within the test: only the dropped connection can move the request.
  Client client(dies->endpoint + "," + live.endpoint, retrying(milliseconds(60000), 3));
  protocol::Request r = request("held");
  r.id = "h1";
  ASSERT_TRUE(client.submit(r));
  ASSERT_TRUE(dies->next_request(milliseconds(5000)));
  dies.reset();
  std::optional<std::pair<std::string, std::string>> moved;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!moved && std::chrono::steady_clock::now() < give_up) {
    EXPECT_FALSE(client.receive(milliseconds(20)));
    moved = live.next_request(milliseconds(0));
  }
  ASSERT_TRUE(moved) << "the request did not move to the live gateway";
  EXPECT_EQ(moved->second, "h1");
  live.answer(moved->first, "h1", "moved");
  EXPECT_EQ(text_of(client.receive("h1", milliseconds(5000))), "moved");
}

TEST(ClientTest, TheFirstReplyWinsAndASecondIsDropped) {
  zmq::context_t context;
  TestGateway slow(context), other(context);
  Client client(slow.endpoint + "," + other.endpoint, retrying(milliseconds(50), 2));
  protocol::Request r = request("x");
  r.id = "dup";
  ASSERT_TRUE(client.submit(r));
  auto at_slow = slow.next_request(milliseconds(5000));
  ASSERT_TRUE(at_slow);
  std::optional<std::pair<std::string, std::string>> at_other;
  while (!at_other) {
    EXPECT_FALSE(client.receive(milliseconds(20)));
    at_other = other.next_request(milliseconds(0));
  }
  // Both answer: the slow gateway was alive after all.
  slow.answer(at_slow->first, "dup", "slow");
  other.answer(at_other->first, "dup", "other");
  auto first = client.receive(milliseconds(5000));
  ASSERT_TRUE(first);
  EXPECT_EQ(std::get<protocol::Reply>(*first).id, "dup");
  EXPECT_FALSE(client.receive(milliseconds(300))) << "answered twice";
}

// A streamed request's partial replies come from receive(id) one by one, in order, and leave it
// pending until its final reply.
TEST(ClientTest, PartialRepliesKeepAStreamedRequestPendingUntilItsFinalReply) {
  zmq::context_t context;
  TestGateway gateway(context);
  Client client(gateway.endpoint, retrying(milliseconds(0), 1));
  protocol::Request r = request("teh speling");
  r.id = "s1";
  r.stream = true;
  ASSERT_TRUE(client.submit(r));
  auto at = gateway.next_request(milliseconds(5000));
  ASSERT_TRUE(at);
  gateway.answer(at->first, "s1", "the ", true);
  gateway.answer(at->first, "s1", "spelling", true);
  gateway.answer(at->first, "s1", "the spelling");
  std::vector<std::pair<bool, std::string>> got;
  for (int i = 0; i < 3; ++i) {
    const auto answer = client.receive("s1", milliseconds(5000));
    ASSERT_TRUE(std::holds_alternative<protocol::Reply>(answer)) << text_of(answer);
    got.emplace_back(std::get<protocol::Reply>(answer).partial, text_of(answer));
  }
  EXPECT_EQ(got, (std::vector<std::pair<bool, std::string>>{
                     {true, "the "}, {true, "spelling"}, {false, "the spelling"}}));
  gateway.answer(at->first, "s1", "again");  // after the final reply: dropped
  EXPECT_FALSE(client.receive(milliseconds(300)));
}

// Partials show the gateway at work on a stream (sent elsewhere it would start over): the retry
// waits until a whole retry_after passes without one.
TEST(ClientTest, PartialsHoldAStreamsRetryOffUntilItsGatewayFallsSilent) {
  zmq::context_t context;
  TestGateway streaming(context), other(context);
  Client client(streaming.endpoint + "," + other.endpoint, retrying(milliseconds(1000), 3));
  protocol::Request r = request("teh speling");
  r.id = "s1";
  r.stream = true;
  ASSERT_TRUE(client.submit(r));
  auto at = streaming.next_request(milliseconds(5000));
  ASSERT_TRUE(at);
  const auto started = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - started < milliseconds(1500)) {
    streaming.answer(at->first, "s1", "w ", true);
    const auto partial = client.receive("s1", milliseconds(5000));
    ASSERT_TRUE(std::holds_alternative<protocol::Reply>(partial)) << text_of(partial);
    EXPECT_TRUE(std::get<protocol::Reply>(partial).partial);
    usleep(100'000);
  }
  EXPECT_FALSE(other.next_request(milliseconds(0))) << "sent again while its partials came";
  std::optional<std::pair<std::string, std::string>> moved;
  const auto give_up = started + std::chrono::seconds(10);
  while (!moved && std::chrono::steady_clock::now() < give_up) {
    EXPECT_FALSE(client.receive(milliseconds(20)));
    moved = other.next_request(milliseconds(0));
  }
  ASSERT_TRUE(moved) << "a silent stream was not sent again";
  EXPECT_EQ(moved->second, "s1");
  EXPECT_GE(std::chrono::steady_clock::now() - started, milliseconds(2000));
}

TEST(ClientTest, NoRetryPastMaxAttemptsOrTheDeadline) {
  zmq::context_t context;
  TestGateway a(context), b(context);
  {
    Client client(a.endpoint + "," + b.endpoint, retrying(milliseconds(30), 1));
    const auto answer = client.call(request("once"), milliseconds(300));
    EXPECT_EQ(text_of(answer), "error: no reply from the gateway in time");
    EXPECT_TRUE(a.next_request(milliseconds(1000)));
    EXPECT_FALSE(b.next_request(milliseconds(0))) << "max_attempts 1 never retries";
  }
  {
    Client client(a.endpoint + "," + b.endpoint, retrying(milliseconds(100), 10));
    protocol::Request r = request("short deadline");
    r.timeout_ms = 150;  // one retry at 100 ms; the next would be at 200 ms, past the deadline
    const auto answer = client.call(r, milliseconds(500));
    EXPECT_EQ(text_of(answer), "error: no reply from the gateway in time");
    int sends = 0;
    while (a.next_request(milliseconds(0)) || b.next_request(milliseconds(0))) ++sends;
    EXPECT_EQ(sends, 2);
  }
}

TEST(ClientTest, OneGatewayIsAskedAgainAfterItsRestart) {
  zmq::context_t context;
  char dir[] = "/tmp/seqpipe-client-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string endpoint = "ipc://" + std::string(dir) + "/gateway.sock";
  Client client(endpoint, retrying(milliseconds(100), 5));
  {
    TestGateway dies(context, endpoint);
    protocol::Request r = request("again");
    r.id = "a1";
    ASSERT_TRUE(client.submit(r));
    ASSERT_TRUE(dies.next_request(milliseconds(5000)));
  }  // dies with the request: the client's DEALER reconnects when the gateway is back
  TestGateway restarted(context, endpoint);
  std::optional<std::pair<std::string, std::string>> got;
  while (!got) {
    EXPECT_FALSE(client.receive(milliseconds(20)));
    got = restarted.next_request(milliseconds(0));
  }
  EXPECT_EQ(got->second, "a1");
  restarted.answer(got->first, "a1", "back");
  EXPECT_EQ(text_of(client.receive("a1", milliseconds(5000))), "back");
  std::filesystem::remove_all(dir);
}

TEST(ClientTest, ConnectedSaysWhetherAnyGatewayListens) {
  zmq::context_t context;
  TestGateway a(context);
  Client listening(a.endpoint);
  EXPECT_TRUE(listening.connected(milliseconds(2000)));
  const std::string nowhere = "ipc:///tmp/seqpipe-client-test-nobody-" + std::to_string(getpid());
  Client alone(nowhere);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(alone.connected(milliseconds(100)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
}

}  // namespace
}  // namespace seqpipe::client
