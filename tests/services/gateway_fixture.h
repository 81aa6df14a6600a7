#pragma once
// The gateway's logic on an injected clock, no sockets: the fixture of gateway_test.cc and
// gateway_{streams,admission,failover}_test.cc (one class for the one test suite, so not
// file-local).
#include <gtest/gtest.h>

#include "gateway/gateway.h"
#include "seqpipe/config/config.h"

namespace seqpipe::gateway {

using std::chrono::milliseconds;
// The test's moment zero, on both clocks: the gateway reads no clock of its own.
inline const Now t0{SteadyClock::time_point{} + std::chrono::hours(1), 1'700'000'000'000'000};

class GatewayTest : public ::testing::Test {
 protected:
  GatewayTest()
      : registry_(metrics::make_registry()),
        stage_(*registry_, "gateway"),
        gw_metrics_(*registry_) {}

  Gateway& gateway(config::PipelineConfig c = {}) {
    c.gateway.default_timeout_ms = 1000;
    c.liveness.heartbeat_interval_ms = 100;
    c.liveness.heartbeat_liveness = 3;
    gateway_ = std::make_unique<Gateway>(c, "ipc:///tmp/results.sock", stage_, gw_metrics_);
    return *gateway_;
  }
  static std::vector<std::string> request(const std::string& client, protocol::Request r) {
    return {client, "", protocol::encode_request(r)};
  }
  static protocol::Request texts(std::vector<std::string> t, bool scores = false) {
    protocol::Request r;
    r.id = "c1";
    r.texts = std::move(t);
    r.batch_form = r.texts.size() > 1;
    r.params.return_scores = scores;
    return r;
  }
  static protocol::Reply reply_of(const Outbox& out, size_t i = 0) {
    const std::string& bytes = out.replies.at(i).second;
    auto r = protocol::decode_reply(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    return std::get<protocol::Reply>(r);
  }
  static const stage::Tokenize& work_of(const stage::StageMessage& m) {
    return std::get<stage::Tokenize>(m);
  }
  // The finish reason result_for gives item i: kReasons[i % 3].
  static constexpr protocol::FinishReason kReasons[] = {
      protocol::FinishReason::kEos, protocol::FinishReason::kLength, protocol::FinishReason::kStop};
  static stage::Result result_for(const stage::StageMessage& work,
                                  const std::vector<std::string>& texts) {
    stage::Result result;
    for (const auto& item : work_of(work).items) {
      const size_t i = result.items.size();
      stage::ResultItem r;
      r.request = item.request;
      r.index = item.index;
      r.text = texts[i];
      r.score = -0.5f * static_cast<float>(i + 1);
      r.timings = item.timings;
      r.prompt_tokens = static_cast<uint32_t>(i + 2);
      r.completion_tokens = static_cast<uint32_t>(10 * (i + 1));
      r.finish_reason = kReasons[i % 3];
      result.items.push_back(std::move(r));
      result.items[i].timings.encode_us = 100;
    }
    return result;
  }

  std::shared_ptr<prometheus::Registry> registry_;
  metrics::StageMetrics stage_;
  metrics::GatewayMetrics gw_metrics_;
  std::unique_ptr<Gateway> gateway_;
};

}  // namespace seqpipe::gateway
