#include "seqpipe/transport/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <zmq_addon.hpp>

#include "seqpipe/transport/file_lock.h"

namespace seqpipe::transport {

Socket::Socket(zmq::context_t& context, zmq::socket_type type, const SocketOptions& options)
    : socket_(context, type) {
  socket_.set(zmq::sockopt::linger, options.linger_ms);
  socket_.set(zmq::sockopt::sndhwm, options.high_water_mark);
  socket_.set(zmq::sockopt::rcvhwm, options.high_water_mark);
  if (options.max_message_bytes > 0)
    socket_.set(zmq::sockopt::maxmsgsize, options.max_message_bytes);
  if (!options.routing_id.empty())
    socket_.set(zmq::sockopt::routing_id, zmq::buffer(options.routing_id));
  if (options.curve.server()) {
    socket_.set(zmq::sockopt::curve_server, true);
    socket_.set(zmq::sockopt::curve_secretkey, options.curve.server_secret_key);
    socket_.set(zmq::sockopt::zap_domain, "seqpipe");
  } else if (options.curve.client()) {
    socket_.set(zmq::sockopt::curve_serverkey, options.curve.server_public_key);
    socket_.set(zmq::sockopt::curve_publickey, options.curve.public_key);
    socket_.set(zmq::sockopt::curve_secretkey, options.curve.secret_key);
  }
  if (type == zmq::socket_type::router) {
    // A reply to a peer that went away is an error we can count, not a silent drop.
    socket_.set(zmq::sockopt::router_mandatory, true);
  }
}

std::string bind_problem(int error_number) {
  switch (error_number) {
    case EADDRINUSE:
      return "is in use";
    case EADDRNOTAVAIL:
      return "is not an address of this machine";
    case EACCES:
      return "is a privileged port (below 1024)";
    default:
      return std::string("cannot be bound: ") + std::strerror(error_number);
  }
}

std::string tcp_bind_problem(const std::string& host, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) return "is not an IPv4 address";
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "cannot be bound";
  // As the servers bind: SO_REUSEADDR lets a port in TIME_WAIT go, but not one someone listens on.
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  const bool bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  const int error_number = errno;
  ::close(fd);
  return bound ? "cannot be bound" : bind_problem(error_number);
}

namespace {
// ZeroMQ unlinks an ipc socket file before binding its own, silently taking it from a process
// still serving there. A flock on "<file>.lock", held until this process exits, makes the file
// its binder's: another process's bind is refused, naming the holder.
void lock_ipc_path(const std::filesystem::path& path, const std::string& endpoint,
                   std::string_view key) {
  static std::mutex mutex;
  static std::map<std::string, FileLock> held;
  const std::string lock_path = path.string() + ".lock";
  std::lock_guard guard(mutex);
  if (held.contains(lock_path)) return;
  pid_t holder = 0;
  auto lock = FileLock::try_acquire(lock_path, &holder);
  if (!lock) {
    const std::string problem =
        endpoint + " is bound by another process (pid " + std::to_string(holder) + ", locking " +
        lock_path + "): another pipeline serves on runtime dir " + path.parent_path().string() +
        "; stop it or choose another runtime_dir";
    if (!key.empty()) throw EndpointError(std::string(key) + ": " + problem);
    throw std::runtime_error("bind " + problem);
  }
  held.emplace(lock_path, std::move(*lock));
}
}  // namespace

std::string Socket::bind(const std::string& endpoint, std::string_view key) {
  constexpr std::string_view kIpc = "ipc://";
  if (endpoint.compare(0, kIpc.size(), kIpc) == 0) {
    const std::filesystem::path path(endpoint.substr(kIpc.size()));
    std::error_code ec;
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    if (ec)
      throw std::runtime_error("bind " + endpoint + ": cannot create " +
                               path.parent_path().string() + ": " + ec.message());
    if (!endpoint.starts_with("ipc://@")) lock_ipc_path(path, endpoint, key);  // @: abstract
  }
  std::string wanted = endpoint;
  if (wanted.size() > 2 && wanted.compare(wanted.size() - 2, 2, ":0") == 0) {
    wanted.replace(wanted.size() - 1, 1, "*");  // ZeroMQ's spelling of "any free port"
  }
  try {
    socket_.bind(wanted);
  } catch (const zmq::error_t& e) {
    if (!key.empty()) {
      throw EndpointError(std::string(key) + ": " + endpoint + " " + bind_problem(e.num()));
    }
    throw std::runtime_error("bind " + endpoint + ": " + e.what());
  }
  return socket_.get(zmq::sockopt::last_endpoint);
}

void Socket::connect(const std::string& endpoint) {
  try {
    socket_.connect(endpoint);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error("connect " + endpoint + ": " + e.what());
  }
}

namespace {
template <typename Range>
bool send_frames(zmq::socket_t& socket, const Range& frames, size_t count, bool dontwait) {
  size_t i = 0;
  try {
    for (const auto& f : frames) {
      zmq::send_flags flags = ++i < count ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (dontwait) flags = flags | zmq::send_flags::dontwait;
      if (!socket.send(zmq::const_buffer(f.data(), f.size()), flags)) return false;
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return false;  // ROUTER: the peer is gone (router_mandatory)
    throw;
  }
  return true;
}
}  // namespace

namespace {
void release_shared(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}
}  // namespace

bool Socket::send_shared(std::initializer_list<std::string_view> head,
                         std::span<const SharedFrame> tail, bool dontwait) {
  if (tail.empty()) return send(head, dontwait);
  if (!send_frames(socket_, head, head.size() + 1, dontwait)) return false;
  // The rest of a multipart message whose first frame was queued is queued too (ZeroMQ sends
  // a message whole or not at all).
  size_t i = 0;
  for (const SharedFrame& f : tail) {
    const auto flags = ++i < tail.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    zmq::message_t message;
    if (!f.bytes.empty()) {  // ZeroMQ drops its copy of the owner once the bytes are written
      message = zmq::message_t(const_cast<uint8_t*>(f.bytes.data()), f.bytes.size(), release_shared,
                               new std::shared_ptr<const void>(f.owner));
    }
    if (!socket_.send(message, flags)) return false;
  }
  return true;
}

bool Socket::send(const Frames& frames, bool dontwait) {
  return send_frames(socket_, frames, frames.size(), dontwait);
}

bool Socket::send(std::initializer_list<std::string_view> frames, bool dontwait) {
  return send_frames(socket_, frames, frames.size(), dontwait);
}

std::optional<Parts> Socket::try_recv_parts() {
  Parts parts;
  const auto n = zmq::recv_multipart(socket_, std::back_inserter(parts), zmq::recv_flags::dontwait);
  if (!n) return std::nullopt;
  return parts;
}

std::optional<Frames> Socket::try_recv() {
  auto parts = try_recv_parts();
  if (!parts) return std::nullopt;
  Frames frames;
  frames.reserve(parts->size());
  for (auto& p : *parts) frames.emplace_back(static_cast<const char*>(p.data()), p.size());
  return frames;
}

std::optional<Frames> Socket::recv(std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  try {
    zmq::poll(&item, 1, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return std::nullopt;
    throw;
  }
  if ((item.revents & ZMQ_POLLIN) == 0) return std::nullopt;
  return try_recv();
}

ConnectionWatch::ConnectionWatch(zmq::context_t& context, Socket& watched)
    : watched_(watched.raw()), events_(context, zmq::socket_type::pair) {
  static std::atomic<uint64_t> next{0};  // inproc names are per context; unique per process
  const std::string endpoint = "inproc://seqpipe-connection-watch-" + std::to_string(next++);
  if (zmq_socket_monitor(watched_.handle(), endpoint.c_str(),
                         ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED) != 0)
    throw std::runtime_error("cannot monitor a socket: " + std::string(zmq_strerror(zmq_errno())));
  events_.connect(endpoint);
}

ConnectionWatch::~ConnectionWatch() {
  // Stopped before its PAIR end closes: libzmq 4.3.4 leaks an event (a late disconnect) that it
  // fails to send to a closed monitor.
  zmq_socket_monitor(watched_.handle(), nullptr, 0);
}

std::optional<ConnectionWatch::Event> ConnectionWatch::next() {
  while (auto frames = events_.try_recv()) {
    uint16_t kind = 0;  // the first frame: event number (16 bits), then a 32-bit value
    if (frames->empty() || (*frames)[0].size() < sizeof kind) continue;
    std::memcpy(&kind, (*frames)[0].data(), sizeof kind);
    if (kind == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) return Event::kConnected;
    if (kind == ZMQ_EVENT_DISCONNECTED) return Event::kDisconnected;
  }
  return std::nullopt;
}

bool PushSockets::send(const std::string& endpoint, std::string_view payload) {
  if (endpoint.empty()) return false;
  auto& socket = sockets_[endpoint];
  if (!socket) {
    try {
      auto made = std::make_unique<Socket>(context_, zmq::socket_type::push, options_);
      made->connect(endpoint);
      socket = std::move(made);
    } catch (const std::exception&) {
      sockets_.erase(endpoint);  // a malformed endpoint in an item: nothing to keep
      return false;
    }
  }
  return socket->send({payload}, true);
}

size_t Poller::add(Socket& socket) {
  items_.push_back({socket.raw().handle(), 0, ZMQ_POLLIN, 0});
  return items_.size() - 1;
}

size_t Poller::add(int fd) {
  items_.push_back({nullptr, fd, ZMQ_POLLIN, 0});
  return items_.size() - 1;
}

int Poller::poll(std::chrono::milliseconds timeout) {
  for (auto& item : items_) item.revents = 0;
  try {
    return zmq::poll(items_.data(), items_.size(), timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return 0;
    throw;
  }
}

}  // namespace seqpipe::transport
