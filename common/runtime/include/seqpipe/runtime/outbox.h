#pragma once
// What a socket-free stage produced for its loop to send. Hubs (gateway, batcher) and worker
// stages fill the same shape; the loop sends everything and clears it. A stage never touches a
// socket, so its tests read the outbox.
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "seqpipe/messages/stage_messages.h"
#include "seqpipe/observability/metrics.h"

namespace seqpipe {

struct Outbox {
  // A message over one of the stage's ROUTER or DEALER links. In a hub `link` is the worker
  // socket (a WorkerPool's link) and `peer` the worker's routing id; in a worker `link` is the hub
  // (its index in hub_endpoints) and `peer` is empty.
  struct Send {
    size_t link = 0;
    std::string peer;
    stage::StageMessage message;
    bool operator==(const Send&) const = default;
  };
  std::vector<Send> sends;
  // (endpoint, message) over PUSH to endpoints named at run time: results to the gateway named in
  // an item, sequences to a batcher's ingress, cancels and heartbeats between gateways and
  // batchers. A push never blocks; one that cannot be queued is logged and dropped.
  std::vector<std::pair<std::string, stage::StageMessage>> pushes;
  // (client routing frames, reply bytes): the gateway's replies to its clients.
  std::vector<std::pair<std::vector<std::string>, std::string>> replies;

  // The message of type M pushed to `endpoint` in this outbox, added when there is none yet:
  // items for one peer travel together. The reference lasts until the next push.
  template <class M>
  M& push_to(const std::string& endpoint) {
    for (auto& [to, message] : pushes) {
      if (to == endpoint && std::holds_alternative<M>(message)) return std::get<M>(message);
    }
    pushes.emplace_back(endpoint, M{});
    return std::get<M>(pushes.back().second);
  }
  // A result for the gateway at `gateway` (grouped per gateway).
  void result(const std::string& gateway, stage::ResultItem item) {
    push_to<stage::Result>(gateway).items.push_back(std::move(item));
  }
  // Sends `item`'s gateway a failed result in a message of its own (the request is answered with
  // `error`), logging it with the request id and counting the error (`who`: the stage, for the
  // log): the serving-path error discipline in one place.
  void fail(const stage::WorkHeader& item, protocol::Error error, std::string_view who,
            metrics::StageMetrics& metrics);

  bool empty() const { return sends.empty() && pushes.empty() && replies.empty(); }
  void clear() {
    sends.clear();
    pushes.clear();
    replies.clear();
  }
};

}  // namespace seqpipe
