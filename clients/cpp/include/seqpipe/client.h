#pragma once
// The C++ client of a seqpipe gateway: a DEALER socket, one protocol v1 request at a time
// (docs/PROTOCOL.md). Used by the `seqpipe` CLI, the benchmarks and the end-to-end tests.
#include <chrono>
#include <memory>
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqpipe::client
