#pragma once
// The C++ client of a seqpipe gateway: a DEALER socket speaking protocol v1 (docs/PROTOCOL.md).
// call() is one request and its reply; submit() / cancel() / receive() keep several in flight
// (the load generator keeps many, replies matched by id) and cancel one. Used by the `seqpipe`
// CLI, the benchmarks and the end-to-end tests.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "seqpipe/common/protocol.h"

namespace seqpipe::client {

class Client {
 public:
  // Connects to the gateway's client endpoint (tcp://HOST:PORT or ipc://PATH).
  explicit Client(const std::string& endpoint);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends `request` and waits up to `wait` for its reply. A transport-level failure (no reply
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
  std::variant<protocol::Reply, protocol::Error> receive(const std::string& id,
                                                         std::chrono::milliseconds wait);
  // Sends raw bytes as a request (tests of malformed input) and waits for the reply.
  std::variant<protocol::Reply, protocol::Error> call_raw(const std::string& payload,
                                                          std::chrono::milliseconds wait);

  // Pipelining (after submit()s): the next reply to arrive within `wait`, whatever its id, in
  // completion order, or nullopt. Give every request its own id and match replies by it. Do not
  // mix with call() or receive(id), which skip replies that are not theirs.
  std::optional<std::variant<protocol::Reply, protocol::Error>> receive(
      std::chrono::milliseconds wait);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqpipe::client
