#pragma once
// The gateway's sockets and front doors around its logic (Gateway), served by the one hub loop
// (hub::run_hub): the clients' ROUTER (the msgpack door), the HTTP door's and the gRPC door's
// hand-overs (eventfds), the tokenizers' ROUTER and the results' PULL, read in that order.
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/gateway.h"
#include "gateway/grpc_front_door.h"
#include "gateway/http_front_door.h"
#include "gateway/shared_catalog.h"
#include "gateway/submissions.h"
#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/observability/metrics.h"
#include "seqpipe/runtime/hub_loop.h"
#include "seqpipe/transport/transport.h"

namespace seqpipe::gateway {

class GatewayStage : public hub::HubStage {
 public:
  // Binds the gateway's endpoints (gateway.*_endpoint) and starts the HTTP and gRPC doors when
  // configured: throws when one cannot be bound. Each model version's requests get the per-model
  // settings of its config, loaded over `loaded`'s layers as its replicas load theirs.
  GatewayStage(const config::LoadedConfig& loaded, hub::HubContext& hub);

  void watch(hub::HubSockets& sockets) override;
  std::optional<std::chrono::nanoseconds> until_next_timer() const override;
  void on_readable(size_t input, const Now& now, Outbox& out) override;
  void on_worker(size_t link, const std::string& worker, stage::StageMessage&& message,
                 const Now& now) override;
  std::optional<std::string> on_catalog(std::string_view bytes) override;
  std::vector<status::StageStatus> status() const override { return gateway_.status(); }
  std::string about() const override;
  void tick(const Now& now, Outbox& out) override;
  void dispatch(const Now& now, Outbox& out) override { gateway_.dispatch(now, out); }
  void unreachable(size_t link, const std::string& worker, const Now& now, Outbox& out) override;
  void send_own(Outbox& out) override;
  void stopped() override;

 private:
  static constexpr size_t kNoInput = static_cast<size_t>(-1);
  // Binds clients_, tokenizers_ and results_: the results' bound endpoint.
  std::string bind_sockets(const config::GatewayConfig& gateway);

  metrics::StageMetrics& stage_metrics_;
  metrics::GatewayMetrics gateway_metrics_;
  metrics::FrontDoorMetrics door_metrics_;
  const int metrics_port_;
  const size_t max_frame_bytes_;  // the largest client frame read (and answered too_long)
  transport::Socket clients_, tokenizers_, results_;
  std::string client_endpoint_;
  const std::string results_endpoint_;
  Gateway gateway_;
  SharedCatalog catalog_;
  Submissions submissions_;  // the HTTP door's requests, to the loop
  std::unique_ptr<HttpFrontDoor> http_;
  std::unique_ptr<GrpcFrontDoor> grpc_;
  const stage::Limits limits_{};
  size_t clients_input_ = kNoInput, doors_input_ = kNoInput, grpc_input_ = kNoInput,
         results_input_ = kNoInput;  // HubSockets::input's ids
};

}  // namespace seqpipe::gateway
