#include "gateway/gateway.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace seqpipe::gateway {

namespace {
uint64_t micros(SteadyClock::duration d) {
  return static_cast<uint64_t>(
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
}

void keep_max(stage::StageTimings& into, const stage::StageTimings& t) {
  into.queue_us = std::max(into.queue_us, t.queue_us);
  into.tokenize_us = std::max(into.tokenize_us, t.tokenize_us);
  into.batch_wait_us = std::max(into.batch_wait_us, t.batch_wait_us);
  into.encode_us = std::max(into.encode_us, t.encode_us);
  into.decode_us = std::max(into.decode_us, t.decode_us);
  into.postprocess_us = std::max(into.postprocess_us, t.postprocess_us);
}
}  // namespace

protocol::Limits protocol_limits(const config::PipelineConfig& c) {
  protocol::Limits limits;
  limits.max_message_bytes = c.gateway.max_message_bytes;
  limits.max_texts = c.gateway.max_texts;
  limits.max_text_bytes = c.gateway.max_text_bytes;
  limits.max_new_tokens_cap = c.decoder.max_new_tokens;
  limits.max_beams = std::min(c.decoder.max_beams, c.decoder.num_slots);
  limits.max_timeout_ms = c.gateway.max_timeout_ms;
  limits.priority_levels = c.batcher.priority_levels;
  return limits;
}

Gateway::Gateway(const config::PipelineConfig& config, std::string results_endpoint,
                 metrics::StageMetrics& stage_metrics, metrics::GatewayMetrics& gateway_metrics)
    : config_(config),
      limits_(protocol_limits(config)),
      results_endpoint_(std::move(results_endpoint)),
      metrics_(stage_metrics),
      gateway_metrics_(gateway_metrics),
      liveness_(std::chrono::milliseconds(config.liveness.heartbeat_interval_ms),
                config.liveness.heartbeat_liveness),
      cache_(config.gateway.cache_bytes) {
  for (const auto& endpoint : config.gateway.batcher_endpoints)
    batchers_.push_back({endpoint, {}, true});
  if (batchers_.empty()) batchers_.push_back({config.batcher.ingress_endpoint, {}, true});
}

size_t Gateway::live_batchers() const {
  return static_cast<size_t>(std::count_if(batchers_.begin(), batchers_.end(),
                                           [](const BatcherLink& b) { return b.live; }));
}

std::optional<size_t> Gateway::next_live_batcher(size_t after) const {
  for (size_t k = 1; k <= batchers_.size(); ++k) {
    const size_t i = (after + k) % batchers_.size();
    if (batchers_[i].live) return i;
  }
  return std::nullopt;
}

stage::Tokenize Gateway::tokenize_work(uint64_t id, const Request& r) const {
  stage::Tokenize work;
  for (size_t i = 0; i < r.sources.size(); ++i) {
    if (r.done[i]) continue;
    stage::TextItem item;
    item.request = id;
    item.index = static_cast<uint32_t>(i);
    item.gateway = results_endpoint_;
    item.batcher = batchers_[r.batcher].endpoint;
    item.deadline = r.deadline;
    item.params = r.params;
    item.text = r.sources[i];
    work.items.push_back(std::move(item));
  }
  return work;
}

void Gateway::on_client(std::vector<std::string>&& frames, const Now& now, Outbox& out) {
  if (frames.size() < 2) return;  // no routing frame: nobody to answer
  std::string payload = std::move(frames.back());
  frames.pop_back();
  metrics_.request();
  auto decoded = protocol::decode_request(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()),
      limits_);
  if (auto* rejected = std::get_if<protocol::RejectedRequest>(&decoded)) {
    reply_error(std::move(frames), std::move(rejected->id), std::move(rejected->error), now.steady,
                now.steady, out);
    return;
  }
  auto& request = std::get<protocol::Request>(decoded);
  if (request.op == protocol::Op::kCancel) {
    cancel(frames, *request.id, now, out);
    return;
  }
  if (waiting_.size() >= static_cast<size_t>(config_.batcher.max_queue_size)) {
    reply_error(std::move(frames), request.id.value_or(""),
                {protocol::ErrorCode::kOverloaded, "the gateway's queue is full; retry later"},
                now.steady, now.steady, out);
    return;
  }
  const bool several_batchers = batchers_.size() > 1;
  std::optional<size_t> batcher =
      several_batchers ? next_live_batcher(last_batcher_) : std::optional<size_t>(0);
  if (!batcher) {
    reply_error(std::move(frames), request.id.value_or(""),
                {protocol::ErrorCode::kUnavailable, "no batcher is live; retry later"}, now.steady,
                now.steady, out);
    return;
  }
  last_batcher_ = *batcher;
  const uint64_t id = next_id_++;
  const uint32_t timeout_ms = request.timeout_ms.value_or(config_.gateway.default_timeout_ms);
  Request r;
  r.batcher = *batcher;
  r.envelope = std::move(frames);
  r.client_id = request.id.value_or("");
  r.batch_form = request.batch_form;
  r.return_scores = request.params.return_scores;
  r.texts.resize(request.texts.size());
  r.scores.resize(request.texts.size());
  r.done.resize(request.texts.size());
  r.remaining = request.texts.size();
  r.received = now.steady;
  r.expires = now.steady + std::chrono::milliseconds(timeout_ms);
  r.deadline = Deadline::after(now, std::chrono::milliseconds(timeout_ms));

  stage::Tokenize work;
  if (several_batchers) {  // kept to submit to another batcher if this one dies
    r.sources = request.texts;
    r.params = request.params;
  }
  for (size_t i = 0; i < request.texts.size(); ++i) {
    if (cache_.enabled()) {
      std::string key = cache_key(config_.model.dir, request.params, request.texts[i]);
      auto hit = cache_.get(key);
      gateway_metrics_.cache_lookup(hit.has_value());
      r.cache_keys.push_back(std::move(key));
      if (hit) {
        r.texts[i] = std::move(hit->text);
        r.scores[i] = hit->score;
        r.done[i] = true;
        --r.remaining;
        continue;
      }
    }
    stage::TextItem item;
    item.request = id;
    item.index = static_cast<uint32_t>(i);
    item.gateway = results_endpoint_;
    if (several_batchers) item.batcher = batchers_[*batcher].endpoint;
    item.deadline = r.deadline;
    item.params = request.params;
    item.text = std::move(request.texts[i]);
    work.items.push_back(std::move(item));
  }
  if (request.id) {
    r.cancel_key = client_key(r.envelope, *request.id);
    by_client_.emplace(r.cancel_key, id);
  }
  deadlines_.emplace(r.expires, id);
  auto& stored = requests_.emplace(id, std::move(r)).first->second;
  if (stored.remaining == 0) {  // every text from the cache
    reply(id, ok_reply(stored), now.steady, out);
    return;
  }
  waiting_.push_back(std::move(work));
  metrics_.set_in_flight(static_cast<double>(requests_.size()));
}

void Gateway::on_tokenizer(const std::string& worker, const stage::StageMessage& message,
                           const Now& now) {
  const bool known = tokenizers_.free_credits(worker) >= 0;
  if (const auto* ready = std::get_if<stage::Ready>(&message)) {
    tokenizers_.announce(worker, ready->credits);
    liveness_.seen(worker, now.steady);
    spdlog::info("gateway: tokenizer joined with {} credits ({} tokenizers)", ready->credits,
                 tokenizers_.size());
  } else if (const auto* credit = std::get_if<stage::Credit>(&message)) {
    if (!known) return;  // from a tokenizer declared dead: its work went elsewhere
    liveness_.seen(worker, now.steady);
    tokenizers_.release(worker, credit->credits);
    for (int i = 0; i < credit->credits && !in_flight_[worker].empty(); ++i)
      in_flight_[worker].pop_front();
  } else if (std::holds_alternative<stage::Heartbeat>(message)) {
    if (known) liveness_.seen(worker, now.steady);
  } else {
    spdlog::warn("gateway: ignored a '{}' message from a tokenizer", stage::kind_name(message));
    metrics_.malformed();
  }
}

void Gateway::on_results(stage::StageMessage&& message, const Now& now, Outbox& out) {
  if (const auto* heartbeat = std::get_if<stage::Heartbeat>(&message)) {  // from a batcher
    for (auto& b : batchers_) {
      if (b.endpoint != heartbeat->from) continue;
      b.last_seen = now.steady;
      if (!b.live) spdlog::info("gateway: batcher {} is live again", b.endpoint);
      b.live = true;
    }
    return;
  }
  auto* results = std::get_if<stage::Result>(&message);
  if (!results) {
    spdlog::warn("gateway: ignored a '{}' message on the results socket",
                 stage::kind_name(message));
    metrics_.malformed();
    return;
  }
  for (auto& item : results->items) {
    auto it = requests_.find(item.request);
    if (it == requests_.end() || item.index >= it->second.done.size() ||
        it->second.done[item.index]) {
      gateway_metrics_
          .late_result();  // answered already (deadline or an earlier error), or a duplicate
      continue;
    }
    Request& r = it->second;
    if (item.error) {
      reply(item.request, protocol::error_reply(r.client_id, std::move(*item.error)), now.steady,
            out);
      continue;
    }
    if (!r.cache_keys.empty()) cache_.put(r.cache_keys[item.index], {item.text, item.score});
    r.texts[item.index] = std::move(item.text);
    r.scores[item.index] = item.score;
    r.done[item.index] = true;
    keep_max(r.timings, item.timings);
    if (--r.remaining == 0) reply(item.request, ok_reply(r), now.steady, out);
  }
}

protocol::Reply Gateway::ok_reply(Request& r) {
  protocol::Reply ok;
  ok.id = r.client_id;
  ok.batch_form = r.batch_form;
  ok.texts = std::move(r.texts);
  if (r.return_scores) ok.scores = std::move(r.scores);
  return ok;
}

void Gateway::reply(uint64_t id, protocol::Reply&& reply, SteadyClock::time_point now,
                    Outbox& out) {
  auto it = requests_.find(id);
  Request& r = it->second;
  const auto& t = r.timings;
  reply.timings = {t.queue_us,  t.tokenize_us,    t.batch_wait_us,         t.encode_us,
                   t.decode_us, t.postprocess_us, micros(now - r.received)};
  const double total_s = static_cast<double>(reply.timings.total_us) * 1e-6;
  gateway_metrics_.request_seconds(reply.ok, total_s);
  if (reply.ok) {
    const double model_s = static_cast<double>(t.encode_us + t.decode_us) * 1e-6;
    gateway_metrics_.latency_split(model_s, std::max(0.0, total_s - model_s));
  } else {
    metrics_.error(reply.error->code);
    spdlog::info("gateway: request {} (id '{}'): {}: {}", id, r.client_id,
                 protocol::wire_name(reply.error->code), reply.error->message);
  }
  out.replies.emplace_back(std::move(r.envelope), protocol::encode_reply(reply));
  deadlines_.erase({r.expires, id});
  if (!r.cancel_key.empty()) {
    auto [first, last] = by_client_.equal_range(r.cancel_key);
    for (auto c = first; c != last; ++c) {
      if (c->second == id) {
        by_client_.erase(c);
        break;
      }
    }
  }
  requests_.erase(it);
  metrics_.set_in_flight(static_cast<double>(requests_.size()));
}

void Gateway::reply_error(Envelope envelope, std::string client_id, protocol::Error error,
                          SteadyClock::time_point received, SteadyClock::time_point now,
                          Outbox& out) {
  metrics_.error(error.code);
  spdlog::info("gateway: rejected request (id '{}'): {}: {}", client_id,
               protocol::wire_name(error.code), error.message);
  protocol::Reply reply = protocol::error_reply(std::move(client_id), std::move(error));
  reply.timings.total_us = micros(now - received);
  gateway_metrics_.request_seconds(false, static_cast<double>(reply.timings.total_us) * 1e-6);
  out.replies.emplace_back(std::move(envelope), protocol::encode_reply(reply));
}

std::string Gateway::client_key(const Envelope& envelope, const std::string& client_id) {
  // Length-prefixed frames: routing ids are arbitrary bytes.
  std::string key;
  for (const auto& frame : envelope) key += std::to_string(frame.size()) + ':' + frame;
  return key + std::to_string(client_id.size()) + ':' + client_id;
}

void Gateway::cancel(const Envelope& envelope, const std::string& client_id, const Now& now,
                     Outbox& out) {
  auto [first, last] = by_client_.equal_range(client_key(envelope, client_id));
  std::vector<uint64_t> ids;
  for (auto c = first; c != last; ++c) ids.push_back(c->second);
  gateway_metrics_.cancel(!ids.empty());
  if (ids.empty()) {
    spdlog::info(
        "gateway: cancel of id '{}' ignored: no such request in flight (answered already?)",
        client_id);
    return;
  }
  stage::Cancel cancel;
  for (uint64_t id : ids) {
    const Request& r = requests_.at(id);
    // The batcher forgets a cancelled request at its deadline: no work of it can matter later.
    cancel.requests.push_back({id, results_endpoint_, r.deadline});
    reply(id,
          protocol::error_reply(r.client_id,
                                {protocol::ErrorCode::kCancelled, "cancelled by the client"}),
          now.steady, out);
  }
  // Every batcher: a re-submitted request may have work at two.
  for (const auto& b : batchers_) out.to_batcher.emplace_back(b.endpoint, cancel);
}

void Gateway::expire(const Now& now, Outbox& out) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now.steady) {
    const uint64_t id = deadlines_.begin()->second;
    const auto& r = requests_.at(id);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(r.expires - r.received).count();
    reply(id,
          protocol::error_reply(r.client_id, {protocol::ErrorCode::kDeadlineExceeded,
                                              "no result within " + std::to_string(ms) + " ms"}),
          now.steady, out);
  }
}

void Gateway::dispatch(const Now& now, Outbox& out) {
  while (!waiting_.empty()) {
    stage::Tokenize& work = waiting_.front();
    auto it = requests_.find(work.items.front().request);
    const std::string& to = work.items.front().batcher;
    if (it == requests_.end() || (!to.empty() && to != batchers_[it->second.batcher].endpoint)) {
      waiting_.pop_front();  // answered while it waited (deadline), or re-submitted elsewhere
      continue;
    }
    auto worker = tokenizers_.take(1);
    if (!worker) break;
    const uint64_t queued = micros(now.steady - it->second.received);
    for (auto& item : work.items) item.timings.queue_us = queued;
    in_flight_[*worker].push_back(work);
    out.to_tokenizers.emplace_back(std::move(*worker), std::move(work));
    waiting_.pop_front();
  }
  metrics_.set_queue_depth(static_cast<double>(waiting_.size()));
}

void Gateway::tick(const Now& now, Outbox& out) {
  if (liveness_.heartbeat_due(now.steady)) {
    metrics_.heartbeats_missed(liveness_.silent(now.steady));
    for (const auto& worker : liveness_.workers()) {
      out.to_tokenizers.emplace_back(worker, stage::Heartbeat{});
    }
  }
  for (const auto& worker : liveness_.take_dead(now.steady)) tokenizer_dead(worker, now, out);
  if (batchers_.size() < 2) return;
  const auto timeout = std::chrono::milliseconds(config_.liveness.heartbeat_interval_ms) *
                       config_.liveness.heartbeat_liveness;
  if (now.steady >= next_batcher_heartbeat_) {
    next_batcher_heartbeat_ =
        now.steady + std::chrono::milliseconds(config_.liveness.heartbeat_interval_ms);
    for (const auto& b : batchers_)  // naming where the batcher answers
      out.to_batcher.emplace_back(b.endpoint, stage::Heartbeat{results_endpoint_});
  }
  for (size_t i = 0; i < batchers_.size(); ++i) {
    if (batchers_[i].last_seen == SteadyClock::time_point{})
      batchers_[i].last_seen = now.steady;  // a full period to answer
    if (batchers_[i].live && now.steady - batchers_[i].last_seen > timeout)
      batcher_dead(i, now, out);
  }
}

void Gateway::batcher_dead(size_t index, const Now& now, Outbox& out) {
  if (index >= batchers_.size() || !batchers_[index].live) return;
  batchers_[index].live = false;
  metrics_.worker_dead();
  std::vector<uint64_t> held;
  for (const auto& [id, r] : requests_) {
    if (r.batcher == index) held.push_back(id);
  }
  spdlog::warn(
      "gateway: batcher {} is silent ({} of {} live); {} request(s) it held are re-submitted or "
      "answered",
      batchers_[index].endpoint, live_batchers(), batchers_.size(), held.size());
  for (uint64_t id : held) {
    Request& r = requests_.at(id);
    const auto other = next_live_batcher(index);
    if (r.resubmitted || !other) {
      reply(id,
            protocol::error_reply(
                r.client_id,
                {protocol::ErrorCode::kUnavailable,
                 r.resubmitted ? "two batchers failed on this request"
                               : "the batcher holding this request died and no other is live"}),
            now.steady, out);
      continue;
    }
    r.resubmitted = true;
    r.batcher = *other;
    stage::Tokenize work = tokenize_work(id, r);
    metrics_.redispatched(static_cast<double>(work.items.size()));
    waiting_.push_front(std::move(work));
  }
}

void Gateway::tokenizer_dead(const std::string& worker, const Now& now, Outbox& out) {
  if (!tokenizers_.remove(worker)) return;
  liveness_.forget(worker);
  metrics_.worker_dead();
  auto node = in_flight_.extract(worker);
  const size_t held = node.empty() ? 0 : node.mapped().size();
  spdlog::warn(
      "gateway: a tokenizer is dead ({} left); {} message(s) it held are re-dispatched or answered",
      tokenizers_.size(), held);
  if (node.empty()) return;
  auto& lost = node.mapped();
  for (auto it = lost.rbegin(); it != lost.rend(); ++it) {
    const uint64_t id = it->items.front().request;
    auto request = requests_.find(id);
    if (request == requests_.end()) continue;  // answered already
    if (request->second.retried || tokenizers_.size() == 0) {
      reply(id,
            protocol::error_reply(
                request->second.client_id,
                {protocol::ErrorCode::kUnavailable,
                 request->second.retried
                     ? "two tokenizer replicas failed on this request"
                     : "the tokenizer holding this request died and no other is live"}),
            now.steady, out);
      continue;
    }
    request->second.retried = true;
    metrics_.redispatched(static_cast<double>(it->items.size()));
    waiting_.push_front(std::move(*it));
  }
}

std::vector<status::StageStatus> Gateway::status() const {
  const int free = tokenizers_.total_free();
  return {{"gateway", 1, static_cast<int>(requests_.size()), static_cast<int>(waiting_.size()), 0},
          {"tokenizer", static_cast<int>(tokenizers_.size()), tokenizers_.total_capacity() - free,
           0, free}};
}

std::optional<SteadyClock::time_point> Gateway::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

}  // namespace seqpipe::gateway
