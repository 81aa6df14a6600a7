#pragma once
// Heartbeats between hubs and workers: `liveness.*` keys.
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

namespace seqpipe::config {

// Heartbeats between each hub (gateway, batcher) and its workers, as the ZeroMQ guide's
// Paranoid Pirate: both sides send one every interval; a peer silent for liveness intervals is
// dead. The hub then gives the dead worker's work to another replica (once) and the worker
// reconnects with backoff and announces its capacity again.
struct LivenessConfig {
  // Milliseconds between heartbeats.
  int heartbeat_interval_ms = 1000;
  // Missed heartbeats after which a peer is declared dead.
  int heartbeat_liveness = 3;
  // Longest pause between a worker's reconnection attempts (the first waits one interval,
  // each next one twice as long, up to this).
  int reconnect_max_ms = 8000;

  bool operator==(const LivenessConfig&) const = default;
};

}  // namespace seqpipe::config
