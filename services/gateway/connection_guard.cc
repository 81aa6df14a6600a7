#include "gateway/connection_guard.h"

#include <event2/bufferevent.h>
#include <sys/socket.h>

#include <string_view>

namespace seqpipe::gateway {

ConnectionGuard::~ConnectionGuard() {
  for (auto& [connection, c] : connections_) bufferevent_decref(connection);
}

bufferevent* ConnectionGuard::open(event_base* base) {
  // Counted against the limit: only connections still open, not one closed since the last sweep.
  forget_freed();
  bufferevent* connection = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
  if (connection == nullptr) return nullptr;  // evhttp makes its own then, unguarded
  bufferevent_incref(connection);
  connections_[connection] = {.since = std::chrono::steady_clock::now(),
                              .excess = connections_.size() >= max_};
  return connection;
}

void ConnectionGuard::delivered(bufferevent* connection) {
  if (auto it = connections_.find(connection); it != connections_.end()) it->second.busy = true;
}

void ConnectionGuard::answered(bufferevent* connection) {
  if (auto it = connections_.find(connection); it != connections_.end()) {
    it->second.busy = false;
    it->second.since = std::chrono::steady_clock::now();
  }
}

void ConnectionGuard::forget_freed() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    bufferevent_data_cb read = nullptr;
    bufferevent_getcb(it->first, &read, nullptr, nullptr, nullptr);
    if (read == nullptr) {  // evhttp freed it: ours was the last reference (this closes it)
      bufferevent_decref(it->first);
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void ConnectionGuard::sweep(std::chrono::steady_clock::time_point now) {
  forget_freed();
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    bufferevent* connection = it->first;
    Connection& c = it->second;
    const int fd = bufferevent_getfd(connection);
    if (fd >= 0 && !c.closing && !c.busy && (c.excess || now - c.since > request_timeout_)) {
      // No request is being answered on it, so nothing of evhttp's is in the way of a canned
      // answer; the shutdown makes evhttp see the end of the connection and free it.
      if (c.excess) {
        constexpr std::string_view k503 =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            "Content-Length: 40\r\nConnection: close\r\n\r\n"
            "{\"error\": \"too many connections open\"}";
        (void)!::send(fd, k503.data(), k503.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      ::shutdown(fd, SHUT_RDWR);
      c.closing = true;
    }
  }
}

}  // namespace seqpipe::gateway
