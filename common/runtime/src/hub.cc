#include "seqpipe/runtime/hub.h"

#include <random>

#include "seqpipe/runtime/model_control.h"
#include "seqpipe/runtime/worker.h"

namespace seqpipe::hub {

std::string item_key(const stage::WorkHeader& item) {
  return item.gateway + '\n' + std::to_string(item.request) + '\n' + std::to_string(item.index);
}

uint64_t draw_incarnation() {
  std::random_device random;
  const uint64_t n = (uint64_t{random()} << 32) | random();
  return n == 0 ? 1 : n;
}

void read_workers(transport::Socket& socket, std::string_view from, const stage::Limits& limits,
                  metrics::StageMetrics& metrics,
                  const std::function<std::vector<status::StageStatus>()>& status,
                  const std::function<void(const std::string&, stage::StageMessage&&)>& on_message,
                  const std::function<std::optional<std::string>(std::string_view)>& catalog) {
  while (auto parts = socket.try_recv_parts()) {
    const std::string worker = parts->empty() ? std::string() : (*parts)[0].to_string();
    if (parts->size() == 2 && (*parts)[1].to_string_view() == status::kProbe) {
      socket.send({std::string_view(worker), std::string_view(status::encode(status()))});
    } else if (parts->size() == 3 &&
               (*parts)[1].to_string_view() == model_control::kCatalogCommand) {
      const std::optional<std::string> answer =
          catalog ? catalog((*parts)[2].to_string_view()) : std::nullopt;
      if (answer) socket.send({std::string_view(worker), std::string_view(*answer)});
    } else if (auto message = worker::decode_parts(std::move(*parts), 1, from, limits, metrics)) {
      on_message(worker, std::move(*message));
    }
  }
}

void send_rounds(Outbox& out, const std::vector<transport::Socket*>& sockets,
                 transport::PushSockets& pushes, std::string_view hub,
                 const std::function<void(Outbox&)>& dispatch,
                 const std::function<void(size_t, const std::string&, Outbox&)>& unreachable) {
  for (int round = 0; round < 4; ++round) {
    dispatch(out);
    if (out.sends.empty() && out.pushes.empty()) break;
    auto sends = std::move(out.sends);
    auto pushed = std::move(out.pushes);
    out.sends.clear();
    out.pushes.clear();
    for (auto& [link, peer, message] : sends) {
      if (!worker::send_message(*sockets.at(link), peer, message)) unreachable(link, peer, out);
    }
    for (const auto& [endpoint, message] : pushed) {
      if (!pushes.send(endpoint, stage::encode(message))) {
        spdlog::warn("{}: could not send a '{}' message to {}", hub, stage::kind_name(message),
                     endpoint);
      }
    }
  }
}

}  // namespace seqpipe::hub
