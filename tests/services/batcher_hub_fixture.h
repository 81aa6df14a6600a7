#pragma once
// The batcher hub on an injected clock, no sockets: the fixture and helpers of
// batcher_hub*_test.cc (one class for the one test suite, so not file-local).
#include <gtest/gtest.h>

#include "batcher/batcher_hub.h"
#include "seqpipe/config/config.h"

namespace seqpipe::batcher {

using std::chrono::milliseconds;
// The test's moment zero, on both clocks: the hub reads no clock of its own.
inline const Now t0{Clock::time_point{} + std::chrono::hours(1), 1'700'000'000'000'000};

inline stage::SequenceItem item(uint64_t request, int tokens = 5, int beams = 1) {
  stage::SequenceItem w;
  w.request = request;
  w.gateway = "ipc:///tmp/gw.sock";
  w.deadline = Deadline::after(t0, std::chrono::seconds(60));
  w.params.num_beams = beams;
  w.ids.assign(static_cast<size_t>(tokens), 7);
  return w;
}
// The same sequence as an encoder returns it.
inline stage::EncodedItem encoded(uint64_t request, int tokens = 5, int beams = 1) {
  return stage::next_hop<stage::EncodedItem>(item(request, tokens, beams));
}
// What an encoder answers for the batch `encode` (an encode message).
inline stage::Encoded encoded_batch(const stage::StageMessage& encode, int credits) {
  stage::Encoded answer{credits, {}};
  for (auto i : std::get<stage::Encode>(encode).items)
    answer.items.push_back(stage::next_hop<stage::EncodedItem>(std::move(i)));
  return answer;
}
// What a decoder answers for `item`.
inline stage::DecodedItem decoded(stage::EncodedItem item) {
  return stage::next_hop<stage::DecodedItem>(std::move(item));
}

inline stage::StageMessage sequences(std::vector<stage::SequenceItem> items) {
  return stage::Sequence{std::move(items)};
}

inline std::vector<uint64_t> requests(const stage::StageMessage& m) {
  std::vector<uint64_t> out;
  std::visit(
      [&](const auto& message) {
        if constexpr (requires { message.items; }) {
          for (const auto& i : message.items) out.push_back(i.request);
        } else if constexpr (requires { message.requests; }) {
          for (const auto& r : message.requests) out.push_back(r.request);
        }
      },
      m);
  return out;
}
template <class M>
const M& as(const stage::StageMessage& m) {
  return std::get<M>(m);
}

class BatcherHubTest : public ::testing::Test {
 protected:
  BatcherHubTest() : registry_(metrics::make_registry()), metrics_(*registry_, "batcher") {
    config_.batcher.max_batch_size = 2;
    config_.batcher.preferred_batch_sizes = {2};
    config_.batcher.max_queue_delay_us = 1000;
    config_.liveness.heartbeat_interval_ms = 100;
    config_.liveness.heartbeat_liveness = 3;
  }
  BatcherHub& hub() {
    hub_ = std::make_unique<BatcherHub>(config_.batcher, config_.liveness, metrics_);
    return *hub_;
  }
  // The messages of one role in the outbox (heartbeats left out).
  static std::vector<Outbox::Send> sent(const Outbox& out, Role role) {
    std::vector<Outbox::Send> v;
    for (const auto& m : out.sends) {
      if (m.link == link(role) && !std::holds_alternative<stage::Heartbeat>(m.message))
        v.push_back(m);
    }
    return v;
  }

  config::PipelineConfig config_;
  std::shared_ptr<prometheus::Registry> registry_;
  metrics::StageMetrics metrics_;
  std::unique_ptr<BatcherHub> hub_;
};

}  // namespace seqpipe::batcher
