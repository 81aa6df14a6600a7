#pragma once
// The transport's first layer: a thin RAII socket over cppzmq that every service uses the same
// way (limits set, ipc directories made, ephemeral ports read back), and a poller. Patterns
// (credit broker, heartbeats) sit on top of it in the stages. Routing identities and payloads
// are byte strings, never C strings.
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <zmq.hpp>

namespace seqpipe::transport {

using Frames = std::vector<std::string>;
// A multipart message as ZeroMQ received it: no frame copied out.
using Parts = std::vector<zmq::message_t>;

// A frame sent in place, without a copy: ZeroMQ holds `owner` until it has written the bytes out.
struct SharedFrame {
  std::span<const uint8_t> bytes;
  std::shared_ptr<const void> owner;
};

// CurveZMQ (ZeroMQ RFC 26; keys in Z85 text, made by seqpipe/security/security.h), set before
// bind/connect: a server socket (it binds) gives its secret key and authenticates clients through
// its context's ZAP handler; a client socket (it connects) gives its key pair and the server's
// public key. All empty: plain text.
struct CurveKeys {
  std::string server_secret_key;                          // a server's
  std::string public_key, secret_key, server_public_key;  // a client's
  bool server() const { return !server_secret_key.empty(); }
  bool client() const { return !server_public_key.empty(); }
};

struct SocketOptions {
  // ZMQ_MAXMSGSIZE: a peer sending a larger frame is disconnected before the frame is buffered,
  // so a hostile client cannot exhaust memory. 0: no limit (only for trusted in-process peers).
  int64_t max_message_bytes = 64 << 20;
  int linger_ms = 0;  // on close, drop what is unsent: shutdown never hangs on a dead peer
  int high_water_mark = 100000;  // messages queued per peer before send blocks / drops
  std::string routing_id;        // a DEALER's identity as the ROUTER sees it; empty: assigned
  CurveKeys curve;               // plain text unless set
};

// Why a TCP address cannot be bound, from bind's errno: "is in use", "is not an address of this
// machine", ... (the text after "HOST:PORT ").
std::string bind_problem(int error_number);
// The same for a server that does not report errno (HTTP, /metrics): tries a socket of its own
// on HOST:PORT (an IPv4 address) and says what that bind says ("cannot be bound" if it works).
std::string tcp_bind_problem(const std::string& host, int port);

// A bind of an endpoint that a config key names failed: "<key>: <endpoint> <why>". The same
// address will be as busy after a restart, so a service exits as for a bad config (status 2,
// run_service_main) and is not restarted.
struct EndpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Socket {
 public:
  Socket(zmq::context_t& context, zmq::socket_type type, const SocketOptions& options = {});

  // Binds and returns the endpoint actually bound: tcp://HOST:0 or :* comes back with its port.
  // For ipc://PATH the directory is created first. Throws std::runtime_error naming the endpoint;
  // with `key` (the config key that names it), an EndpointError
  // "gateway.client_endpoint: tcp://127.0.0.1:5555 is in use".
  std::string bind(const std::string& endpoint, std::string_view key = {});
  void connect(const std::string& endpoint);

  // One multipart message. False when, with dontwait, it would block, or when a ROUTER's
  // destination (the first frame) is not connected; nothing is sent then.
  bool send(const Frames& frames, bool dontwait = false);
  bool send(std::initializer_list<std::string_view> frames, bool dontwait = false);
  // The same with `head` copied, then `tail` sent in place (large tensors). A name of its own:
  // an array passed as `tail` to an overload of send() would convert to `dontwait`.
  bool send_shared(std::initializer_list<std::string_view> head, std::span<const SharedFrame> tail,
                   bool dontwait = false);
  // One multipart message if one is waiting, else nullopt. Never blocks.
  [[nodiscard]] std::optional<Frames> try_recv();
  // The same, the frames as ZeroMQ holds them (a large frame is not copied again).
  [[nodiscard]] std::optional<Parts> try_recv_parts();
  // Waits up to `timeout` for one message.
  [[nodiscard]] std::optional<Frames> recv(std::chrono::milliseconds timeout);

  zmq::socket_t& raw() { return socket_; }

 private:
  zmq::socket_t socket_;
};

// Whether a connecting socket's connection to its peer is up, through a ZeroMQ socket monitor:
// a dropped connection is seen at once rather than after missed heartbeats (a peer that died, or
// restarted: ZeroMQ reconnects by itself, and the new peer knows nothing of this socket). Made
// before the watched socket connects, so no event is missed; destroyed before it closes.
class ConnectionWatch {
 public:
  // kConnected: the peer accepted the connection (the ZeroMQ handshake, CurveZMQ's included,
  // succeeded); kDisconnected: an accepted or refused connection dropped.
  enum class Event { kConnected, kDisconnected };
  ConnectionWatch(zmq::context_t& context, Socket& watched);
  ~ConnectionWatch();
  ConnectionWatch(const ConnectionWatch&) = delete;
  ConnectionWatch& operator=(const ConnectionWatch&) = delete;

  // The next event if one is waiting; never blocks.
  std::optional<Event> next();
  // The monitor's end, for a Poller: readable when an event waits.
  Socket& events() { return events_; }

 private:
  zmq::socket_t& watched_;
  Socket events_;
};

// PUSH sockets to endpoints named at run time (a work item's owning gateway), one per endpoint,
// connected on first use. Sends never block: a gateway that is gone must not stall the sender
// (its requests are answered by its own deadline, or were answered already).
class PushSockets {
 public:
  // `options` for every socket (its curve: the keys of a client of the receiving hub).
  explicit PushSockets(zmq::context_t& context, SocketOptions options = {})
      : context_(context), options_(std::move(options)) {}
  // False when the message could not be queued (or the endpoint is empty or malformed).
  bool send(const std::string& endpoint, std::string_view payload);

 private:
  zmq::context_t& context_;
  SocketOptions options_;
  std::map<std::string, std::unique_ptr<Socket>> sockets_;
};

// Waits on several sockets at once (the hubs' loops). Allocation-free after add().
class Poller {
 public:
  size_t add(Socket& socket);  // returns the socket's index
  size_t add(int fd);          // a file descriptor (an eventfd, say); returns its index
  // Waits up to `timeout` (negative: forever) for any socket to be readable; returns how many
  // are. EINTR (a signal) returns 0 so the caller can look at its stop flag.
  int poll(std::chrono::milliseconds timeout);
  bool readable(size_t index) const { return (items_[index].revents & ZMQ_POLLIN) != 0; }

 private:
  std::vector<zmq::pollitem_t> items_;
};

}  // namespace seqpipe::transport
