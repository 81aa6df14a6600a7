#pragma once
// The C++ client of a seqpipe gateway: a DEALER socket (docs/PROTOCOL.md). call() sends one
// request and waits for its reply; send() + receive() keep many requests in flight on the same
// socket, replies matched by id (the load generator). Used by the `seqpipe` CLI, the benchmarks
// and the end-to-end tests.
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
  // Sends raw bytes as a request (tests of malformed input) and waits for the reply.
  std::variant<protocol::Reply, protocol::Error> call_raw(const std::string& payload, std::chrono::milliseconds wait);

  // Pipelining: send() queues a request without waiting (false when it could not be queued);
  // receive() returns the next reply to arrive within `wait`, in completion order, or nullopt.
  // Give every request its own id and match replies by it. Do not mix with call(), which skips
  // replies that are not its own.
  bool send(const protocol::Request& request);
  std::optional<std::variant<protocol::Reply, protocol::Error>> receive(std::chrono::milliseconds wait);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqpipe::client
