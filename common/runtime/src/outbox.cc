#include "seqpipe/runtime/outbox.h"

#include <spdlog/spdlog.h>

namespace seqpipe {

void Outbox::fail(const stage::WorkHeader& item, protocol::Error error, std::string_view who,
                  metrics::StageMetrics& metrics) {
  spdlog::warn("{}: request {} item {}: {}: {}", who, item.request, item.index,
               protocol::wire_name(error.code), error.message);
  metrics.error(error.code);
  pushes.emplace_back(item.gateway, stage::Result{{stage::failed(item, std::move(error))}});
}

}  // namespace seqpipe
