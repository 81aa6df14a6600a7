// The gateway's admission: a client message decoded under its model version's limits, and
// whether a new request may go into the pipeline (InFlightLimit), answered at once when not.
#include <spdlog/spdlog.h>

#include <chrono>
#include <string>

#include "gateway/gateway.h"
#include "seqpipe/config/gateway_config.h"

namespace seqpipe::gateway {

std::optional<Gateway::Admitted> Gateway::admit(
    Caller& caller, std::variant<protocol::Request, protocol::RejectedRequest>& decoded,
    const OwnDecode& own_decode, const Now& now, Outbox& out) {
  auto rejected = [&](protocol::Error&& error, std::string&& id) {
    reply_error(std::move(caller), std::move(id), std::move(error), now.steady, now.steady, out);
    return std::nullopt;
  };
  if (auto* r = std::get_if<protocol::RejectedRequest>(&decoded))
    return rejected(std::move(r->error), std::move(r->id));
  auto* request = &std::get<protocol::Request>(decoded);
  if (request->op == protocol::Op::kCancel) {
    cancel(caller.envelope, *request->id, now, out);
    return std::nullopt;
  }
  if (retries_one_in_flight(caller, *request)) {
    spdlog::debug("gateway: request id '{}' is in flight from this client already: answered once",
                  *request->id);
    return std::nullopt;
  }
  auto model = models_.resolve(request->model, request->version);
  if (auto* unknown = std::get_if<protocol::Error>(&model))
    return rejected(std::move(*unknown), request->id.value_or(""));
  const std::string& key = std::get<std::string>(model);
  const ModelSettings& settings = settings_.of(key);
  if (!settings.not_loaded.empty()) {
    return rejected(
        {protocol::ErrorCode::kUnavailable,
         "model " + key + " is not served: its config does not load: " + settings.not_loaded},
        request->id.value_or(""));
  }
  // Its version's token and beam caps are below the loosest: its own rules, its own messages.
  if (own_decode && settings_.needs_own_decode(settings)) {
    decoded = own_decode(settings.limits);
    if (auto* r = std::get_if<protocol::RejectedRequest>(&decoded))
      return rejected(std::move(r->error), std::move(r->id));
    request = &std::get<protocol::Request>(decoded);
  }
  return Admitted{std::move(*request), std::move(std::get<std::string>(model)), &settings};
}

// The client libraries send a request again with its id when no reply came within their
// retry_after; on the same connection the one in flight answers it. A second copy would be
// computed twice, and a stream's partials of both would add up to a text twice as long. (A
// door's callers have no envelope: their ids are their own business.)
bool Gateway::retries_one_in_flight(const Caller& caller, const protocol::Request& request) const {
  return request.id && !caller.envelope.empty() &&
         by_client_.contains(client_key(caller.envelope, *request.id));
}

bool Gateway::admit_in_flight(Request& r, const std::string& model, uint32_t timeout_ms,
                              const Now& now, Outbox& out) {
  const size_t items = r.sources.size();
  const auto deadline = now.steady + std::chrono::milliseconds(timeout_ms);
  const InFlightLimit::Verdict verdict = in_flight_.take(model, items, now.steady, deadline);
  if (verdict == InFlightLimit::Verdict::kAdmit) return true;
  const std::string ahead =
      std::to_string(in_flight_.in_flight(model)) + " sequences of this model are in the pipeline";
  std::string why =
      verdict == InFlightLimit::Verdict::kFull
          ? ahead + ", the most a batcher queues (batcher.max_queue_size = " +
                std::to_string(in_flight_.limit()) + ")"
          : "it could not be answered before its deadline (in " + std::to_string(timeout_ms) +
                " ms; " + std::string(config::kDeadlineSources) + "): " + ahead + ", about " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   in_flight_.wait(model).value_or(SteadyClock::duration{}))
                                   .count()) +
                " ms of work at the measured pace and its spread";
  reply_error(
      std::move(r.caller), std::move(r.client_id),
      {protocol::ErrorCode::kOverloaded, "refused at the gateway: " + why + "; retry later"},
      now.steady, now.steady, out);
  return false;
}

}  // namespace seqpipe::gateway
