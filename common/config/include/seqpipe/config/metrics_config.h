#pragma once
// The /metrics HTTP servers: `metrics.*` keys.
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

#include <string>
#include <vector>

namespace seqpipe::config {

// The /metrics HTTP servers of every process.
struct MetricsConfig {
  // IPv4 address the /metrics servers listen on: 127.0.0.1 (this machine only) or 0.0.0.0
  // (every interface: a Prometheus in another container or on another machine). The ports are
  // each stage's metrics_port.
  std::string address = "127.0.0.1";
  // Upper bounds (microseconds, strictly ascending) of every latency histogram's buckets:
  // 100 us .. 5 s by default.
  std::vector<int> latency_buckets_us = {100,    250,    500,     1000,    2500,
                                         5000,   10000,  25000,   50000,   100000,
                                         250000, 500000, 1000000, 2500000, 5000000};

  bool operator==(const MetricsConfig&) const = default;
};

}  // namespace seqpipe::config
