#pragma once
// What the runtime's socket tests share: a bounded wait for the next message on a socket.
#include <chrono>
#include <optional>

#include "seqpipe/transport/transport.h"

namespace seqpipe::test_util {

// The next message on `socket` as ZeroMQ holds it, waiting up to 5 s.
inline std::optional<transport::Parts> parts_within(transport::Socket& socket) {
  transport::Poller poller;
  poller.add(socket);
  if (poller.poll(std::chrono::milliseconds(5000)) <= 0) return std::nullopt;
  return socket.try_recv_parts();
}

}  // namespace seqpipe::test_util
