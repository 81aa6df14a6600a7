#pragma once
// The decoder: `decoder.*` keys.
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

#include <string>

#include "seqpipe/config/worker_config.h"

namespace seqpipe::config {

struct DecoderConfig : WorkerConfig {
  DecoderConfig() { metrics_port = 9130; }
  // Threads per replica (ModelOptions.threads); 0 = auto, as encoder.threads.
  int threads = kAuto;
  // KV cache slots per replica: sequences (beams) decoded at once (KvCacheOptions.num_slots).
  int num_slots = 32;
  // Largest num_beams a request may use (KvCacheOptions.max_beams).
  int max_beams = 8;
  // Largest max_new_tokens a request may use; sizes the cache
  // (KvCacheOptions.max_target_len = max_new_tokens + 1).
  int max_new_tokens = 64;
  // Sequences decoded (a few steps each) before the replica announces itself (0 = none).
  int warmup_batch_size = 8;

  // This stage's engine compute type; empty = model.compute_type.
  std::string compute_type;

  bool operator==(const DecoderConfig&) const = default;
};

}  // namespace seqpipe::config
