#pragma once
// The batcher's sockets around its logic (BatcherHub): the tokenizers' ingress (PULL) and one
// ROUTER per engine stage, in Role's order, served by the one hub loop (hub::run_hub).
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batcher/batcher_hub.h"
#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/runtime/hub_loop.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::batcher {

class BatcherStage : public hub::HubStage {
 public:
  // Binds the batcher's endpoints (batcher.*_endpoint): throws when one cannot be bound.
  BatcherStage(const config::PipelineConfig& config, hub::HubContext& hub);

  void watch(hub::HubSockets& sockets) override;
  std::optional<std::chrono::nanoseconds> until_next_timer() const override;
  void on_readable(size_t input, const Now& now, Outbox& out) override;
  void on_worker(size_t link, const std::string& worker, stage::StageMessage&& message,
                 const Now& now) override;
  std::vector<status::StageStatus> status() const override { return batcher_.status(); }
  std::string about() const override { return about_; }
  void tick(const Now& now, Outbox& out) override { batcher_.tick(now, out); }
  void dispatch(const Now& now, Outbox& out) override { batcher_.dispatch(now, out); }
  void unreachable(size_t link, const std::string& worker, const Now& now, Outbox& out) override;
  void stopped() override;

 private:
  metrics::StageMetrics& metrics_;
  transport::Socket ingress_, encoders_, decoders_, postprocessors_;
  BatcherHub batcher_;
  std::string about_;  // the batcher's line of `seqpipe status`
  const stage::Limits limits_{};
};

}  // namespace seqpipe::batcher
