#pragma once
// The batcher: `batcher.*` keys.
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

#include <cstdint>
#include <string>
#include <vector>

namespace seqpipe::config {

struct BatcherConfig {
  // Batchers `seqpipe up` starts (1..16). Replica k binds each of these endpoints k after the
  // configured one (replica_endpoint) and metrics_port + k when not 0; the gateways submit to
  // them all (gateway.batcher_endpoints) and the encoders, decoders and postprocessors serve
  // them all (hub_endpoints), unless those lists are given.
  int replicas = 1;
  // Bound by the batcher; tokenizers connect. Empty: ipc://{runtime_dir}/batcher-in.sock.
  std::string ingress_endpoint;
  // Bound by the batcher; encoders connect. Empty: ipc://{runtime_dir}/encoder.sock.
  std::string encoder_endpoint;
  // Bound by the batcher; decoders connect. Empty: ipc://{runtime_dir}/decoder.sock.
  std::string decoder_endpoint;
  // Bound by the batcher; postprocessors connect. Empty: ipc://{runtime_dir}/postprocessor.sock.
  std::string postprocessor_endpoint;
  // Most sequences in one encoder batch.
  int max_batch_size = 32;
  // Batch sizes sent as soon as they can be formed (ascending, each <= max_batch_size);
  // empty = only full batches or max_queue_delay_us trigger a send.
  std::vector<int> preferred_batch_sizes = {8, 16, 32};
  // Longest the oldest queued sequence waits for company while a batch is being encoded, in
  // microseconds (with none being encoded, what is queued goes at once): more = fuller batches
  // under load (throughput), less = lower latency.
  uint32_t max_queue_delay_us = 2000;
  // Most padded tokens in one batch (batch size x longest sequence).
  int max_batch_tokens = 4096;
  // Most sequences queued (a memory bound); beyond it requests are refused as overloaded. Within
  // it admission is by deadline (BatcherHub): what could not be served in time is refused.
  int max_queue_size = 1024;
  // Priority levels (as Triton's dynamic batcher): a request's params.priority is 1 (highest)
  // .. priority_levels; each level is its own queue and a batch takes from the highest level
  // first. 1 = no priorities (every request is level 1). max_queue_size bounds all levels together.
  int priority_levels = 1;
  // The level of a request that gives no priority; 1..priority_levels.
  int default_priority_level = 1;
  // Prometheus /metrics HTTP port; 0 = any free port (logged).
  int metrics_port = 9101;

  bool operator==(const BatcherConfig&) const = default;
};

}  // namespace seqpipe::config
