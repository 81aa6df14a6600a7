#pragma once
// The HTTP front door's bounds on connections that libevent's evhttp does not keep itself
// (http_front_door.h serves with it).
#include <chrono>
#include <cstddef>
#include <map>

struct bufferevent;
struct event_base;

namespace seqpipe::gateway {

// What libevent 2.1's evhttp does not bound itself (2.2 adds evhttp_set_max_connections; no
// version has a whole-request timer): the number of open connections and how long one may take
// to deliver a request. It keeps a reference on each connection's bufferevent, so it can tell
// when evhttp has freed one (its callbacks are cleared) and let it go.
class ConnectionGuard {
 public:
  ConnectionGuard(size_t max_connections, std::chrono::milliseconds request_timeout)
      : max_(max_connections), request_timeout_(request_timeout) {}
  ~ConnectionGuard();                   // lets every connection go; before the event base is freed
  bufferevent* open(event_base* base);  // evhttp's bevcb: a new connection
  void delivered(bufferevent* connection);  // a whole request arrived: its time stops
  void answered(bufferevent* connection);   // its reply went out: the next request's starts
  // Every few hundred ms: lets freed connections go, answers the excess 503 and closes the slow.
  void sweep(std::chrono::steady_clock::time_point now);
  size_t open_connections() const { return connections_.size(); }

 private:
  void forget_freed();  // lets the connections evhttp freed go
  struct Connection {
    std::chrono::steady_clock::time_point since;  // opened, or its last reply
    bool busy = false;                            // a request delivered and not yet answered
    bool excess = false;                          // over max_connections when it opened
    bool closing = false;                         // shut down by the sweep
  };
  size_t max_;
  std::chrono::milliseconds request_timeout_;
  std::map<bufferevent*, Connection> connections_;
};

}  // namespace seqpipe::gateway
