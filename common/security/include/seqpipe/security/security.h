#pragma once
// CurveZMQ for the pipeline's tcp:// sockets: key pairs and their files, the allow list of
// client keys a hub accepts, and the ZAP handler (ZeroMQ RFC 27) that enforces it. A socket is
// made a CurveZMQ server or client through transport::SocketOptions; this module supplies the
// keys and the authentication.
//
// Key files are czmq's certificate format (zcert), so czmq tools read them: NAME holds the public
// key, NAME_secret both keys; the secret file must not be readable by group or others.
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "seqpipe/config/config_error.h"
#include "seqpipe/config/security_config.h"
#include "seqpipe/observability/metrics.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::security {

// Z85 text, 40 characters each.
struct KeyPair {
  std::string public_key;
  std::string secret_key;
};

KeyPair generate_key_pair();

// transport::SocketOptions::curve for a hub's bound socket, and for a socket connecting to it.
transport::CurveKeys curve_server(const KeyPair& server);
transport::CurveKeys curve_client(const KeyPair& client, const std::string& server_public_key);

// Writes `path` (public) and `path`_secret (mode 0600). Refuses to overwrite either file.
// Throws std::runtime_error naming the file.
void write_key_files(const std::string& path, const KeyPair& keys);
// Reads a secret certificate (`NAME_secret`); refuses one that group or others may read.
KeyPair read_secret_key_file(const std::string& path);
// The public key of a certificate file (public or secret).
std::string read_public_key_file(const std::string& path);
// The allow list: the public keys of every certificate file in `dir` (files ending in _secret
// are skipped). Throws when the directory cannot be read or holds no key.
std::set<std::string> read_allow_list(const std::string& dir);

// Answers the ZAP requests of one ZeroMQ context on its own thread: a CURVE client whose public
// key is in the allow list is accepted, any other is refused (its handshake fails: it gets no
// work and sees no replies) and reported to `on_refused` (the key in Z85, the peer address),
// which runs on the handler's thread. Construct it before the first CurveZMQ server socket of the
// context binds; it stops and joins in its destructor.
class ZapHandler {
 public:
  using Refused = std::function<void(const std::string& public_key, const std::string& address)>;
  ZapHandler(zmq::context_t& context, std::set<std::string> allowed, Refused on_refused);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

 private:
  void serve();

  zmq::socket_t socket_;
  std::set<std::string> allowed_;
  Refused on_refused_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// --- The config's security section (config::SecurityConfig), for the services and tools ---
// Key files are read when a process starts; a problem with one (missing, not a certificate, a
// secret file group or others may read) is a config::ConfigError naming the key and the file.

// The keys of a socket that connects to a hub (a worker's, a client's, one hub's towards the
// other): this process's key pair (security.client_key's NAME_secret) and the hubs' public key
// (security.server_key's NAME). All empty, plain text, when security.server_key is unset.
transport::CurveKeys client_keys(const config::SecurityConfig& security);

// Every key file the config names, read and checked as the processes will read them (a
// config::ConfigError naming the key): `seqpipe up` asks before it starts any process.
void check_key_files(const config::SecurityConfig& security);

// A hub's CurveZMQ, made before its first bind and kept while its sockets live: the server keys
// of every socket it binds, the client keys of the sockets it connects to the other hub, and the
// ZAP handler admitting the keys of security.allowed_clients; every refusal is counted
// (metrics::SecurityMetrics) and logged, once a minute per key at most (a refused worker tries
// again at every reconnection, a hostile peer as often as it likes). Plain text, and no handler,
// when security.server_key is unset.
class HubSecurity {
 public:
  HubSecurity(zmq::context_t& context, const config::SecurityConfig& security, std::string_view hub,
              prometheus::Registry& registry);
  HubSecurity(const HubSecurity&) = delete;  // its handler refers to it
  HubSecurity& operator=(const HubSecurity&) = delete;
  const transport::CurveKeys& server() const { return server_; }
  const transport::CurveKeys& client() const { return client_; }

 private:
  // On the handler's thread.
  void refused(const std::string& key, const std::string& address);

  std::string hub_;
  transport::CurveKeys server_;
  transport::CurveKeys client_;
  std::unique_ptr<metrics::SecurityMetrics> metrics_;  // outlives the handler that counts
  std::map<std::string, std::chrono::steady_clock::time_point> last_logged_;  // by key
  std::unique_ptr<ZapHandler> zap_;
};

}  // namespace seqpipe::security
