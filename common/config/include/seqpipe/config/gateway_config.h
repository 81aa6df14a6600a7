#pragma once
// The gateway: `gateway.*` keys.
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "seqpipe/protocol/protocol.h"

namespace seqpipe::config {

// Where a request's deadline comes from, as errors about it name it.
inline constexpr std::string_view kDeadlineSources =
    "gateway.default_timeout_ms; timeout_ms or HTTP's X-Request-Timeout per request";

struct GatewayConfig {
  // Where clients connect (bound by the gateway). Default: loopback only.
  std::string client_endpoint = "tcp://127.0.0.1:5555";
  // Bound by the gateway; tokenizers connect. Empty: ipc://{runtime_dir}/tokenizer.sock.
  std::string tokenizer_endpoint;
  // Bound by the gateway; postprocessors connect and send results. Empty:
  // ipc://{runtime_dir}/results.sock.
  std::string results_endpoint;
  // Deadline of a request that names none, in milliseconds: long enough for a request to wait
  // its turn behind a queue the server measured it can serve (admission is by deadline), short
  // enough that a client without a pipeline behind the gateway hears within seconds.
  uint32_t default_timeout_ms = 10000;
  // Largest deadline a request may ask for, in milliseconds; a request asking for more is
  // refused with an error reply.
  // The client-message limits default to the protocol's own (protocol::Limits), defined there
  // once.
  uint32_t max_timeout_ms = protocol::Limits{}.max_timeout_ms;
  // Largest client message in bytes; a larger one is answered with an error and not parsed.
  size_t max_message_bytes = protocol::Limits{}.max_message_bytes;
  // Most texts in one request.
  size_t max_texts = protocol::Limits{}.max_texts;
  // Longest text in bytes (UTF-8).
  size_t max_text_bytes = protocol::Limits{}.max_text_bytes;
  // Prometheus /metrics HTTP port; 0 = any free port (logged).
  int metrics_port = 9100;
  // Response cache budget in bytes (LRU over successful results, keyed by model, params and
  // text as sent); 0 = no cache.
  size_t cache_bytes = 0;
  // A text of more words than this goes through the model in pieces of at most this many words
  // (whole sentences where they fit), joined back in the reply; 0 = whole texts.
  size_t split_words = 0;
  // The batchers this gateway submits to, by their ingress endpoints: empty = the one
  // batcher.ingress_endpoint. With several, requests go round-robin to the live ones; gateway
  // and batchers exchange heartbeats (over the ingress and the results sockets), and the work of
  // a batcher that falls silent is submitted once to another (else answered `unavailable`).
  std::vector<std::string> batcher_endpoints;
  // Gateways `seqpipe up` starts (1..16). Replica k binds each of these endpoints k after the
  // configured one (replica_endpoint), and metrics_port + k and the HTTP and gRPC ports + k
  // when not 0; the tokenizers serve them all and clients are given every client endpoint.
  int replicas = 1;
  // HTTP/JSON and KServe v2 on this IPV4:PORT (port 0: any free port, logged); empty: no HTTP.
  // Default: loopback only. docs/PROTOCOL.md, "HTTP".
  std::string http_endpoint = "127.0.0.1:8000";
  // The model repository API (POST /v2/repository/...: index, load, unload) on HTTP beyond
  // loopback. false: served only when http_endpoint is a loopback address (anyone who reaches
  // it could load and unload models); true: served wherever HTTP is.
  bool repository_api_public = false;
  // A file holding the bearer token every repository API call must carry
  // (`Authorization: Bearer <token>`; the file's first line, at least 16 characters), read once
  // at start. Empty: no token asked.
  std::string repository_token_file;
  // KServe v2 over gRPC on this IPV4:PORT (port 0: any free port, logged); empty: no gRPC.
  // Default: off (127.0.0.1:8001 is Triton's and the usual choice). docs/PROTOCOL.md, "gRPC".
  std::string grpc_endpoint;

  bool operator==(const GatewayConfig&) const = default;
};

// gateway.http_endpoint's and grpc_endpoint's parts: an IPv4 address and a port (0: any free
// port); nullopt for text that is not IPV4:PORT (an empty endpoint, off, included).
struct HttpAddress {
  std::string host;
  int port = 0;
};
std::optional<HttpAddress> parse_http_address(std::string_view endpoint);
// A host or interface name that is loopback (an IPv4 literal 127.x, localhost, [::1], the
// interface lo): only this machine reaches it.
bool loopback_host(std::string_view host);

}  // namespace seqpipe::config
