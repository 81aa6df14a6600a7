#pragma once
// Operator status, asked of the hubs on their worker sockets: `seqpipe status` connects a DEALER
// to the gateway's tokenizer endpoint and to the batcher's encoder endpoint and sends the probe;
// the hub answers with one StageStatus per stage it knows (the gateway: itself and the
// tokenizers; the batcher: itself, encoders, decoders, postprocessors). The probe is not a stage
// message, so a hub tells it apart before decoding, and a worker never sends it.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::status {

inline constexpr std::string_view kProbe = "seqpipe-status-v1";

// A hub's own row: it grants credits to its workers and holds none.
inline constexpr int kNoCredits = -1;

struct StageStatus {
  std::string stage;
  int replicas = 0;   // live workers (hubs: 1)
  int in_flight = 0;  // work held by the workers (credits in use), or requests in flight (gateway)
  int queued = 0;     // work waiting in the hub for credit
  int free_credits = 0;       // capacity left across the replicas (hubs: kNoCredits)
  int lost = 0;               // replicas declared dead since the hub started (a restart is one)
  int64_t uptime_s = 0;       // hubs: seconds since the hub started; worker stages: 0
  int64_t requests = 0;       // the gateway: requests received since it started; others: 0
  int64_t errors = 0;         // the gateway: requests answered with an error since it started
  int64_t client_errors = 0;  // the gateway: of those, the client's (protocol::is_client_error)
  // A hub's own row: what it serves as it runs ("models speller-t5/1 (models/speller-t5); HTTP
  // 127.0.0.1:8000; ..."), its bound ports and, the batcher, its workers' compute types.
  std::string about{};

  bool operator==(const StageStatus&) const = default;
};

// A hub's answer with its own row (the first) given the seconds since `started` and `about`.
std::vector<StageStatus> with_uptime(std::vector<StageStatus> stages,
                                     std::chrono::steady_clock::time_point started,
                                     std::string_view about = {});

std::string encode(const std::vector<StageStatus>& stages);
// nullopt for bytes that are not a status reply.
std::optional<std::vector<StageStatus>> decode(std::string_view bytes);

// What the two hubs of a pipeline answer, asked as `seqpipe status` and the gateway's HTTP
// readiness check ask: a fresh DEALER to the gateway's tokenizer endpoint and to the batcher's
// encoder endpoint, the probe, and up to `wait` for each answer.
struct HubAnswer {
  std::string hub;                                 // "gateway" or "batcher"
  std::string endpoint;                            // where it was asked
  std::optional<std::vector<StageStatus>> stages;  // nullopt: no answer in time (down)
};
struct PipelineStatus {
  std::vector<HubAnswer> hubs;
  // Hubs that did not answer ("batcher (down)") and stages without a live replica (with a
  // repository: on no version's line).
  std::vector<std::string> missing;
  bool ready() const { return missing.empty(); }
  // Whether model version `key` ("name/version") is served now: every hub answered and each
  // worker stage has a live replica of it (its line "<stage> <key>").
  bool ready_for(const std::string& key) const;
  // Whether a hub still counts a live replica of version `key` on any stage (one stopped is
  // counted until the hub sees it leave).
  bool has_replicas_of(const std::string& key) const;
};
// `curve`: the prober's keys as a client of the hubs (security::client_keys, or a hub's own).
PipelineStatus ask_pipeline(zmq::context_t& context, const config::PipelineConfig& config,
                            std::chrono::milliseconds wait, const transport::CurveKeys& curve);

}  // namespace seqpipe::status
