#include "gateway/gateway.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <span>

#include "seqpipe/config/batcher_config.h"
#include "seqpipe/config/gateway_config.h"
#include "seqpipe/config/liveness_config.h"
#include "seqpipe/config/model_config.h"

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

// An error reply's log line: load shedding (`overloaded`, half the requests at twice capacity)
// only at debug, counted by seqpipe_stage_errors_total; a line a refusal would cost the CPU the
// served requests need. Every other error at info.
spdlog::level::level_enum log_level(protocol::ErrorCode code) {
  return code == protocol::ErrorCode::kOverloaded ? spdlog::level::debug : spdlog::level::info;
}
}  // namespace

Gateway::Gateway(const config::PipelineConfig& config, std::string results_endpoint,
                 metrics::StageMetrics& stage_metrics, metrics::GatewayMetrics& gateway_metrics,
                 ModelSettingsTable::VersionConfig version_config)
    : max_queue_size_(static_cast<size_t>(config::batcher_of(config).max_queue_size)),
      default_timeout_ms_(config::gateway_of(config).default_timeout_ms),
      serves_repository_(!config::model_of(config).repository.empty()),
      default_model_(config::model_of(config).name),
      results_endpoint_(std::move(results_endpoint)),
      metrics_(stage_metrics),
      gateway_metrics_(gateway_metrics),
      models_(config::ModelCatalog::of(config)),
      settings_(config, std::move(version_config)),
      tokenizers_({"gateway", "tokenizer", kTokenizerLink, hub::Answers::kInOrder},
                  config::liveness_of(config), stage_metrics),
      batchers_(config, results_endpoint_),
      cache_(config::gateway_of(config).cache_bytes),
      in_flight_(static_cast<size_t>(std::max(config::batcher_of(config).max_queue_size, 1)),
                 2 * static_cast<size_t>(std::max(config::batcher_of(config).max_batch_size, 1))),
      next_id_((hub::draw_incarnation() >> 8) + 1) {
  settings_.load(models_);
}

model_control::InFlight Gateway::set_models(
    const std::vector<model_control::CatalogEntry>& catalog) {
  if (serves_repository_) {
    models_ = config::ModelCatalog(model_control::versions_of(catalog), default_model_);
    settings_.set(catalog);
  }
  model_control::InFlight in_flight;
  for (const auto& [id, r] : requests_) ++in_flight[r.model];
  return in_flight;
}

stage::Tokenize Gateway::tokenize_work(uint64_t id, const Request& r) const {
  stage::Tokenize work;
  for (size_t i = 0; i < r.sources.size(); ++i) {
    if (r.done[i]) continue;
    stage::TextItem item;
    item.request = id;
    item.index = static_cast<uint32_t>(i);
    item.gateway = results_endpoint_;
    item.batcher = batchers_.target(id);
    item.deadline = r.deadline;
    item.params = r.params;
    item.stream = r.stream;
    item.model = r.model;
    item.text = r.sources[i];
    work.items.push_back(std::move(item));
  }
  return work;
}

// Items: each text, or its pieces. Kept to submit again if its batcher dies or restarts.
void Gateway::add_texts(Request& r, std::vector<std::string>&& texts, size_t split_words) {
  for (auto& text : texts) {
    ClientText c{r.sources.size(), 1, {}, text::split_text(text, split_words)};
    if (c.pieces.size() == 1) {
      c.pieces.clear();
      r.sources.push_back(std::move(text));
    } else {
      c.items = c.pieces.size();
      for (const auto& piece : c.pieces)
        r.sources.push_back(text.substr(piece.begin, piece.end - piece.begin));
      c.whole = std::move(text);
    }
    r.client_texts.push_back(std::move(c));
  }
}

// The items the response cache holds are done before any work is sent.
void Gateway::answer_from_cache(Request& r) {
  const size_t items = r.sources.size();
  for (size_t i = 0; i < items; ++i) {
    if (cache_.enabled() && cacheable(r.params)) {
      std::string key = cache_key(r.model, r.params, r.sources[i]);
      auto hit = cache_.get(key);
      gateway_metrics_.cache_lookup(hit.has_value());
      r.cache_keys.push_back(std::move(key));
      if (hit) {
        r.texts[i] = std::move(hit->text);
        r.scores[i] = hit->score;
        r.usage[i] = hit->usage;
        r.done[i] = true;
        --r.remaining;
      }
    }
  }
}

void Gateway::on_client(std::vector<std::string>&& frames, const Now& now, Outbox& out) {
  if (frames.size() < 2) return;  // no routing frame: nobody to answer
  std::string payload = std::move(frames.back());
  frames.pop_back();
  metrics_.request();
  ++requests_received_;
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(payload.data()),
                                       payload.size());
  auto decoded = protocol::decode_request(bytes, settings_.decode_limits());
  Caller caller{std::move(frames), {}};
  auto admitted = admit(
      caller, decoded,
      [&](const protocol::Limits& limits) { return protocol::decode_request(bytes, limits); }, now,
      out);
  if (admitted) start(std::move(caller), std::move(*admitted), now, out);
}

void Gateway::submit(Submission&& submission, const Now& now, Outbox& out) {
  metrics_.request();
  ++requests_received_;
  Caller caller{{}, std::move(submission.sink)};
  auto admitted = admit(caller, submission.request, {}, now, out);
  if (admitted) start(std::move(caller), std::move(*admitted), now, out);
}

void Gateway::start(Caller&& caller, Admitted&& admitted, const Now& now, Outbox& out) {
  protocol::Request& request = admitted.request;
  if (throttle_.refuse(admitted.model, now.steady)) {
    const int taken = static_cast<int>(100 * throttle_.accepted_share(admitted.model));
    reply_error(std::move(caller), request.id.value_or(""),
                {protocol::ErrorCode::kOverloaded,
                 "refused at the gateway: the pipeline is overloaded (it took " +
                     std::to_string(taken) + "% of this model's recent requests); retry later"},
                now.steady, now.steady, out);
    return;
  }
  if (waiting() >= max_queue_size_) {
    reply_error(std::move(caller), request.id.value_or(""),
                {protocol::ErrorCode::kOverloaded, "the gateway's queue is full; retry later"},
                now.steady, now.steady, out);
    return;
  }
  const uint64_t id = next_id_;
  if (!batchers_.assign(id)) {
    reply_error(std::move(caller), request.id.value_or(""),
                {protocol::ErrorCode::kUnavailable, "no batcher is live; retry later"}, now.steady,
                now.steady, out);
    return;
  }
  ++next_id_;
  const uint32_t timeout_ms = request.timeout_ms.value_or(default_timeout_ms_);
  Request r;
  r.caller = std::move(caller);
  r.client_id = request.id.value_or("");
  r.batch_form = request.batch_form;
  r.return_scores = request.params.return_scores;
  r.stream = request.stream;
  add_texts(r, std::move(request.texts), admitted.settings->split_words);
  const size_t items = r.sources.size();
  if (items > max_queue_size_) {  // it could never be queued
    batchers_.forget(id);
    reply_error(std::move(r.caller), std::move(r.client_id),
                {protocol::ErrorCode::kTooLong,
                 "the texts make " + std::to_string(items) + " pieces of at most " +
                     std::to_string(admitted.settings->split_words) +
                     " words (gateway.split_words); one request may hold at most "
                     "batcher.max_queue_size = " +
                     std::to_string(max_queue_size_)},
                now.steady, now.steady, out);
    return;
  }
  if (!admit_in_flight(r, admitted.model, timeout_ms, now, out)) {
    batchers_.forget(id);
    return;
  }
  if (request.params.num_return_sequences > 1) r.sequences.emplace(items);
  r.texts.resize(items);
  r.scores.resize(items);
  r.usage.resize(items);
  r.done.resize(items);
  r.remaining = items;
  r.received = now.steady;
  r.expires = now.steady + std::chrono::milliseconds(timeout_ms);
  r.deadline = Deadline::after(now, std::chrono::milliseconds(timeout_ms));
  r.params = request.params;
  r.model = std::move(admitted.model);
  answer_from_cache(r);
  // Every item not answered from the cache.
  stage::Tokenize work = tokenize_work(id, r);
  if (request.id) {
    r.cancel_key = client_key(r.caller.envelope, *request.id);
    by_client_.emplace(r.cancel_key, id);
  }
  deadlines_.emplace(r.expires, id);
  auto& stored = requests_.emplace(id, std::move(r)).first->second;
  if (stored.remaining == 0) {  // every item from the cache
    reply(id, ok_reply(stored), now.steady, out);
    return;
  }
  waiting_[stored.model].push_back(std::move(work));
  metrics_.set_in_flight(static_cast<double>(requests_.size()));
}

void Gateway::on_tokenizer(const std::string& worker, const stage::StageMessage& message,
                           const Now& now) {
  if (const auto* ready = std::get_if<stage::Ready>(&message)) {
    // A tokenizer that names no model serves the default one (an older worker, or tests).
    const std::string& model = ready->model.empty() ? models_.default_key() : ready->model;
    if (!tokenizers_.find(model) && !models_.serves(model))
      spdlog::info(
          "gateway: a tokenizer serves model {}, which this gateway does not route to (yet)",
          model);
    tokenizers_.ready(worker, model, ready->credits, now.steady);
    return;
  }
  hub::WorkerPool<stage::Tokenize>* pool = tokenizers_.of(worker);
  if (!pool) return;  // never announced itself: it will when it reconnects
  if (const auto* credit = std::get_if<stage::Credit>(&message)) {
    if (!pool->heard(worker, now.steady)) return;  // declared dead: its work went elsewhere
    pool->release(worker, credit->credits);
    for (int i = 0; i < credit->credits; ++i) pool->answered(worker);  // one per message
  } else if (std::holds_alternative<stage::Heartbeat>(message)) {
    pool->heard(worker, now.steady);
  } else {
    spdlog::warn("gateway: ignored a '{}' message from a tokenizer", stage::kind_name(message));
    metrics_.malformed();
  }
}

void Gateway::on_results(stage::StageMessage&& message, const Now& now, Outbox& out) {
  if (const auto* heartbeat = std::get_if<stage::Heartbeat>(&message)) {  // from a batcher
    submit_again(batchers_.heard(heartbeat->from, heartbeat->incarnation, now.steady), now, out);
    return;
  }
  auto* results = std::get_if<stage::Result>(&message);
  if (!results) {
    spdlog::warn("gateway: ignored a '{}' message on the results socket",
                 stage::kind_name(message));
    metrics_.malformed();
    return;
  }
  size_t answered_here = 0;  // final answers of requests in flight: a pace sample
  std::string answered_model;
  for (auto& item : results->items) {
    auto it = requests_.find(item.request);
    const bool answered = it == requests_.end() || item.index >= it->second.done.size() ||
                          it->second.done[item.index];
    if (item.partial) {  // a partial of a request answered already just goes
      if (!answered && it->second.stream) {
        it->second.texts[item.index] = std::move(item.text);  // until its final text comes
        stream_partial(it->second, streamed_so_far(it->second), out);
      }
      continue;
    }
    if (answered) {
      gateway_metrics_
          .late_result();  // answered already (deadline or an earlier error), or a duplicate
      continue;
    }
    Request& r = it->second;
    ++answered_here;
    if (answered_model.empty()) answered_model = r.model;
    if (item.error) {
      if (item.error->code == protocol::ErrorCode::kOverloaded)
        throttle_.refused_downstream(r.model, now.steady);
      reply(item.request, protocol::error_reply(r.client_id, std::move(*item.error)), now.steady,
            out);
      continue;
    }
    const protocol::Usage usage{item.prompt_tokens, item.completion_tokens, item.finish_reason};
    if (!r.cache_keys.empty()) cache_.put(r.cache_keys[item.index], {item.text, item.score, usage});
    if (r.sequences) {
      auto& hypotheses = (*r.sequences)[item.index];
      hypotheses.push_back({item.text, item.score});
      for (size_t k = 0; k < item.alternatives.size(); ++k)
        hypotheses.push_back({std::move(item.alternatives[k]), item.alternative_scores[k]});
    }
    r.texts[item.index] = std::move(item.text);
    r.scores[item.index] = item.score;
    r.usage[item.index] = usage;
    r.done[item.index] = true;
    keep_max(r.timings, item.timings);
    if (--r.remaining == 0) {
      reply(item.request, ok_reply(r), now.steady, out);
    } else if (r.stream) {  // a piece done: the text up to the next piece is final
      stream_partial(r, streamed_so_far(r), out);
    }
  }
  in_flight_.answered(answered_model, answered_here, now.steady);
}

void Gateway::reply(uint64_t id, protocol::Reply&& reply, SteadyClock::time_point now,
                    Outbox& out) {
  auto it = requests_.find(id);
  Request& r = it->second;
  // A streamed text's partials add up to the final text: the rest goes as a last partial (all
  // of it for a response cache hit).
  if (r.stream && reply.ok && !reply.texts.empty()) {
    if (!reply.texts[0].starts_with(r.streamed))
      spdlog::warn("gateway: request {} (id '{}'): its partials are not a prefix of its text", id,
                   r.client_id);
    stream_partial(r, reply.texts[0], out);
  }
  const auto& t = r.timings;
  reply.timings = {t.queue_us,  t.tokenize_us,    t.batch_wait_us,         t.encode_us,
                   t.decode_us, t.postprocess_us, micros(now - r.received)};
  const double total_s = static_cast<double>(reply.timings.total_us) * 1e-6;
  gateway_metrics_.request_seconds(reply.ok, total_s, r.model);
  if (reply.ok) {
    const double model_s = static_cast<double>(t.encode_us + t.decode_us) * 1e-6;
    gateway_metrics_.latency_split(model_s, std::max(0.0, total_s - model_s), r.model);
  } else {
    metrics_.error(reply.error->code);
    ++errors_answered_;
    client_errors_answered_ += protocol::is_client_error(reply.error->code);
    spdlog::log(log_level(reply.error->code), "gateway: request {} (id '{}'): {}: {}", id,
                r.client_id, protocol::wire_name(reply.error->code), reply.error->message);
  }
  send(r.caller, std::move(reply), true, out);
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
  in_flight_.give_back(r.model, r.sources.size());
  requests_.erase(it);
  batchers_.forget(id);
  metrics_.set_in_flight(static_cast<double>(requests_.size()));
}

void Gateway::unavailable(uint64_t id, const std::string& why, SteadyClock::time_point now,
                          Outbox& out) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;  // answered already
  reply(id, protocol::error_reply(it->second.client_id, {protocol::ErrorCode::kUnavailable, why}),
        now, out);
}

void Gateway::reply_error(Caller caller, std::string client_id, protocol::Error error,
                          SteadyClock::time_point received, SteadyClock::time_point now,
                          Outbox& out) {
  metrics_.error(error.code);
  ++errors_answered_;
  client_errors_answered_ += protocol::is_client_error(error.code);
  spdlog::log(log_level(error.code), "gateway: rejected request (id '{}'): {}: {}", client_id,
              protocol::wire_name(error.code), error.message);
  protocol::Reply reply = protocol::error_reply(std::move(client_id), std::move(error));
  reply.timings.total_us = micros(now - received);
  gateway_metrics_.request_seconds(false, static_cast<double>(reply.timings.total_us) * 1e-6);
  send(caller, std::move(reply), true, out);
}

void Gateway::send(Caller& caller, protocol::Reply&& reply, bool last, Outbox& out) {
  if (caller.sink) return caller.sink(std::move(reply));
  out.replies.emplace_back(last ? std::move(caller.envelope) : caller.envelope,
                           protocol::encode_reply(reply));
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
  for (const auto& endpoint : batchers_.endpoints()) out.pushes.emplace_back(endpoint, cancel);
}

void Gateway::expire(const Now& now, Outbox& out) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now.steady) {
    const uint64_t id = deadlines_.begin()->second;
    const auto& r = requests_.at(id);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(r.expires - r.received).count();
    reply(id,
          protocol::error_reply(r.client_id, {protocol::ErrorCode::kDeadlineExceeded,
                                              "no result within " + std::to_string(ms) + " ms (" +
                                                  std::string(config::kDeadlineSources) + ")"}),
          now.steady, out);
  }
}

void Gateway::dispatch(const Now& now, Outbox& out) {
  for (auto& [model, waiting] : waiting_) {
    hub::WorkerPool<stage::Tokenize>* pool = tokenizers_.find(model);
    while (!waiting.empty()) {
      stage::Tokenize& work = waiting.front();
      const uint64_t id = work.items.front().request;
      auto it = requests_.find(id);
      const std::string& to = work.items.front().batcher;
      if (it == requests_.end() || (!to.empty() && to != batchers_.target(id))) {
        waiting.pop_front();  // answered while it waited (deadline), or re-submitted elsewhere
        continue;
      }
      auto worker = pool ? pool->take(1) : std::nullopt;
      if (!worker) break;  // this version's tokenizers are busy (or none yet): the others go on
      const uint64_t queued = micros(now.steady - it->second.received);
      for (auto& item : work.items) item.timings.queue_us = queued;
      pool->sent(*worker, work);
      out.sends.push_back({kTokenizerLink, std::move(*worker), std::move(work)});
      waiting.pop_front();
    }
  }
  metrics_.set_queue_depth(static_cast<double>(waiting()));
}

size_t Gateway::waiting() const {
  size_t n = 0;
  for (const auto& [model, waiting] : waiting_) n += waiting.size();
  return n;
}

void Gateway::tick(const Now& now, Outbox& out) {
  for (const auto& worker : tokenizers_.tick(now, out)) tokenizer_dead(worker, now, out);
  submit_again(batchers_.tick(now.steady, out), now, out);
}

void Gateway::submit_again(const BatcherFailover::Failover& failover, const Now& now, Outbox& out) {
  for (size_t i = 0; i < failover.dead; ++i) metrics_.worker_dead();
  for (const auto& [id, why] : failover.lost) unavailable(id, why, now.steady, out);
  // Submitted again, first in line, in arrival order.
  for (auto id = failover.moved.rbegin(); id != failover.moved.rend(); ++id) {
    auto it = requests_.find(*id);
    if (it == requests_.end()) continue;
    stage::Tokenize work = tokenize_work(*id, it->second);
    metrics_.redispatched(static_cast<double>(work.items.size()));
    waiting_[it->second.model].push_front(std::move(work));
  }
}

void Gateway::tokenizer_dead(const std::string& worker, const Now& now, Outbox& out) {
  hub::WorkerPool<stage::Tokenize>* pool = tokenizers_.of(worker);
  if (!pool) return;
  auto lost = pool->remove(worker, now, [&](const stage::TextItem& item) {
    return requests_.count(item.request) == 0;  // answered already
  });
  tokenizers_.forget(worker);
  for (const auto& [item, why] : lost.failed) unavailable(item.request, why, now.steady, out);
  // The rest waits again, first in line, in the order first sent: one message per request.
  std::vector<stage::Tokenize> again;
  for (auto& item : lost.again) {
    if (requests_.count(item.request) == 0) continue;  // answered by a failure above
    if (again.empty() || again.back().items.front().request != item.request) again.emplace_back();
    again.back().items.push_back(std::move(item));
  }
  for (auto it = again.rbegin(); it != again.rend(); ++it) {
    const std::string model = it->items.front().model;
    waiting_[model].push_front(std::move(*it));
  }
}

std::vector<status::StageStatus> Gateway::status() const {
  std::vector<status::StageStatus> lines = {{.stage = "gateway",
                                             .replicas = 1,
                                             .in_flight = static_cast<int>(requests_.size()),
                                             .queued = static_cast<int>(waiting()),
                                             .free_credits = status::kNoCredits,
                                             .requests = requests_received_,
                                             .errors = errors_answered_,
                                             .client_errors = client_errors_answered_}};
  for (auto& line : tokenizers_.status([](const std::string&) { return 0; }))
    lines.push_back(std::move(line));
  return lines;
}

std::optional<SteadyClock::time_point> Gateway::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

}  // namespace seqpipe::gateway
