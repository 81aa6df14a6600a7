#pragma once
// The C++ client of seqpipe gateways: a DEALER socket per gateway speaking protocol v1
// (docs/PROTOCOL.md). call() is one request and its reply; submit() / cancel() / receive() keep
// several in flight (the load generator keeps many, replies matched by id) and cancel one. Used
// by the `seqpipe` CLI, the benchmarks and the end-to-end tests.
//
// A gateway that dies loses nothing for the client (the ZeroMQ guide's Lazy Pirate and
// Freelance patterns): when its connection drops (a socket monitor sees it at once), every
// request it held is sent again, with the same id, to the next gateway of the list (when there
// is only one, to it again: it is delivered once the gateway is back); a request not answered
// within `retry_after` (a hung gateway keeps its connection) moves on the same way. At most
// `max_attempts` sends in all and none past the request's own deadline; new requests follow to
// that gateway. The first reply to an id is the answer; a second one (a slow gateway that
// answered after all) is dropped, so no request is answered twice.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "seqpipe/protocol/protocol.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::client {

struct ClientOptions {
  // A request without a reply this long goes again to the next gateway, for a gateway that hangs
  // without dropping its connection (a dead one is noticed at once). Longer than the slowest
  // normal answer: a retry to a gateway that is only slow computes the request twice. 0: only
  // a dropped connection moves requests. A streamed request's partial counts as a reply: its
  // gateway is at work on it (the retry then waits for a whole retry_after without one).
  std::chrono::milliseconds retry_after{5000};
  // Sends of one request at most, the first included (1: never retry).
  int max_attempts = 3;
  // CurveZMQ: this client's key pair and the gateways' public key (security::curve_client, or
  // security::client_keys of a config). Empty: plain text.
  transport::CurveKeys curve;
};

// "tcp://a:5555,tcp://b:5555" -> its endpoints (ZeroMQ endpoints have no commas).
std::vector<std::string> split_endpoints(const std::string& endpoints);

class Client {
 public:
  // Connects to every gateway client endpoint in `endpoints` (tcp://HOST:PORT or ipc://PATH,
  // comma-separated); new requests go to the first until it fails to answer.
  explicit Client(const std::string& endpoints, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Whether a connection to some gateway is made within `wait` (a connection, not yet an
  // answer): false says at once that nothing listens there, before any deadline runs out.
  bool connected(std::chrono::milliseconds wait);
  // Sends `request` and waits up to `wait` for its reply (for a streamed request, its first
  // partial: use submit() and receive(id) instead). A transport-level failure (no reply
  // in time, an undecodable reply) comes back as an Error value with code kUnavailable or
  // kInternal; a server-side error is a Reply with ok == false.
  std::variant<protocol::Reply, protocol::Error> call(const protocol::Request& request,
                                                      std::chrono::milliseconds wait);
  // Sends `request` without waiting and returns its id (the request's own, or a fresh one);
  // nullopt when it could not be sent. Its reply comes from receive().
  std::optional<std::string> submit(const protocol::Request& request);
  // Asks the gateway to cancel the in-flight request `id` (sent by this client). Its reply, from
  // receive(), is then the error `cancelled`, or its normal reply when it finished first. False
  // when the cancel could not be sent.
  bool cancel(const std::string& id);
  // Waits up to `wait` for the reply to `id`; replies to other ids that arrive meanwhile are
  // dropped (late replies to calls that timed out). A transport failure is an Error value.
  // A streamed request (Request::stream) has its partial replies (Reply::partial) returned one
  // by one, in order; call it again until a reply that is not partial.
  std::variant<protocol::Reply, protocol::Error> receive(const std::string& id,
                                                         std::chrono::milliseconds wait);
  // Sends raw bytes as a request (tests of malformed input) and waits for the reply.
  std::variant<protocol::Reply, protocol::Error> call_raw(const std::string& payload,
                                                          std::chrono::milliseconds wait);

  // Pipelining (after submit()s): the next reply to arrive within `wait`, whatever its id, in
  // completion order, or nullopt. Give every request its own id and match replies by it. Do not
  // mix with call() or receive(id), which skip replies that are not theirs. Requests still
  // waiting are retried from here too, so keep calling it while any is in flight.
  std::optional<std::variant<protocol::Reply, protocol::Error>> receive(
      std::chrono::milliseconds wait);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqpipe::client
