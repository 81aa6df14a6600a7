#pragma once
// CurveZMQ between the processes: `security.*` keys.
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

#include <string>

namespace seqpipe::config {

// CurveZMQ between the processes (docs/DEPLOY.md, "Keys"): with server_key set, every socket a
// hub binds is a CurveZMQ server that admits only the clients in allowed_clients, and every socket
// that connects to a hub is a CurveZMQ client. Key files are `seqpipe keygen`'s: NAME (the public
// key) and NAME_secret (both keys, mode 0600).
struct SecurityConfig {
  // The hubs' certificate NAME: the gateway and batcher read their key pair from NAME_secret;
  // workers and clients read the hubs' public key from NAME (all they need). Empty: plain text.
  std::string server_key;
  // This process's certificate NAME as a client of the hubs (workers, the gateway towards its
  // batchers, the batcher towards the gateways' results, seqpipe send and status): its key pair
  // is read from NAME_secret. Required with server_key.
  std::string client_key;
  // A directory of the client certificates (public files; NAME_secret files are skipped) the
  // hubs admit; any other client is refused, logged and counted. Required with server_key.
  std::string allowed_clients;
  // false: a hub refuses to start when it binds a tcp:// endpoint beyond loopback without
  // server_key, or serves HTTP (never encrypted) beyond loopback. true: allowed, in the clear.
  bool allow_plaintext = false;

  bool operator==(const SecurityConfig&) const = default;
};

}  // namespace seqpipe::config
