#pragma once
// Live model lifecycle, the messages between its three parties. The supervisor (`seqpipe up`)
// owns which model versions run: it binds a control socket (config::control_endpoint) where
// `seqpipe models` and the gateway's KServe repository API ask it to list, load and unload. It
// tells every gateway which versions to route to with a catalog message on the gateway's
// tokenizer endpoint (beside the status probe), and the gateway answers with its requests in
// flight per version, so an unload stops the replicas only once every gateway has stopped routing
// to them and finished what it held. The messages and their codecs (msgpack, through the codec
// the other messages share: protocol/msgpack_io.h); the sockets that carry them are
// runtime/model_control.h's.
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "seqpipe/config/model_repository.h"
#include "seqpipe/protocol/protocol.h"

namespace seqpipe::model_control {

// How long a load may take to warm its replicas up before it is given up (state UNAVAILABLE), and
// so how long a client waits for the supervisor's answer to a load (an unload waits for the
// requests in flight, each within its deadline).
inline constexpr std::chrono::seconds kLoadTimeout{120};
inline constexpr std::chrono::seconds kAnswerWait = kLoadTimeout + std::chrono::seconds(60);

// The first frame of a catalog message (the second: encode_catalog's bytes).
inline constexpr std::string_view kCatalogCommand = "seqpipe-catalog-v2";

// What a gateway applies to a model version's requests: the settings of the version's config
// that the gateway, not a worker, acts on (the protocol's token and beam caps,
// gateway.split_words). The supervisor loads each version's config (its seqpipe.yaml layered as
// its replicas layer it) and sends these typed in the catalog, so a gateway's loop never reads
// or parses a model's files.
struct VersionSettings {
  protocol::Limits limits;  // protocol_limits of the version's config
  size_t split_words = 0;   // gateway.split_words (0: texts are not split)
  // Why the version's config does not load; empty: it loads. Its replicas refuse the same
  // config, so a gateway answers its requests `unavailable` at once.
  std::string not_loaded;
  bool operator==(const VersionSettings&) const;
};
// The protocol limits a gateway enforces under `config` (docs/PROTOCOL.md, "Limits").
protocol::Limits protocol_limits(const config::PipelineConfig& config);
VersionSettings version_settings(const config::PipelineConfig& config);
// The config a version is served with (config::load_model_version_config over the pipeline's
// layers); throws (config::ConfigError) when it does not load.
using VersionConfig = std::function<config::PipelineConfig(const config::ModelVersion&)>;
// The settings of `version`'s config, or why it does not load (not_loaded).
VersionSettings load_version_settings(const VersionConfig& version_config,
                                      const config::ModelVersion& version);

// A version a gateway routes to, with its settings.
struct CatalogEntry {
  config::ModelVersion model;
  VersionSettings settings;
  bool operator==(const CatalogEntry&) const = default;
};

// The versions a gateway routes to, and its answer: requests in flight per model key. A
// not_loaded reason goes cut to kMaxReasonBytes.
std::string encode_catalog(const std::vector<CatalogEntry>& catalog);
std::optional<std::vector<CatalogEntry>> decode_catalog(std::string_view bytes);
std::vector<config::ModelVersion> versions_of(const std::vector<CatalogEntry>& catalog);
using InFlight = std::map<std::string, int>;
std::string encode_in_flight(const InFlight& in_flight);
std::optional<InFlight> decode_in_flight(std::string_view bytes);

// A model version's state, with Triton's names.
enum class State { kLoading, kReady, kUnloading, kUnavailable };
std::string_view state_name(State state);

struct ModelEntry {
  std::string name;
  int version = 0;
  State state = State::kUnavailable;
  std::string reason;  // why unavailable (a bad entry's path and reason, a replica's exit)
  bool operator==(const ModelEntry&) const = default;
};

enum class Op { kIndex, kLoad, kUnload };
struct ControlRequest {
  Op op = Op::kIndex;
  std::string name;            // load, unload
  std::optional<int> version;  // load: that version (else the highest on disk); unload: only it
  bool operator==(const ControlRequest&) const = default;
};
// A reply carries at most this many index entries (by name, then version), each reason cut to
// kMaxReasonBytes: whatever the repository holds, a reply decodes within the control messages'
// limits, so an operation that happened is never answered as if no answer came.
inline constexpr size_t kMaxIndexEntries = 1000;
inline constexpr size_t kMaxReasonBytes = 512;
struct ControlReply {
  std::optional<protocol::Error> error;  // nullopt: done
  std::vector<ModelEntry> models;        // the index after the operation
  size_t more = 0;  // entries of the index left out (past kMaxIndexEntries), set by encode
  bool operator==(const ControlReply&) const = default;
};
std::string encode(const ControlRequest& request);
std::variant<ControlRequest, std::string> decode_request(std::string_view bytes);
std::string encode(const ControlReply& reply);
std::optional<ControlReply> decode_reply(std::string_view bytes);

}  // namespace seqpipe::model_control
