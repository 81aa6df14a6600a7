#include "decoder/decoder_stage.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace seqpipe::decoder {

namespace {
engine::GeneratorOptions generator_options(const DecoderOptions& d) {
  engine::GeneratorOptions o;
  o.cache.num_slots = d.num_slots;
  o.cache.max_beams = d.max_beams;
  o.cache.max_target_len = d.max_new_tokens + 1;  // the start token takes a position
  o.cache.max_source_len = d.max_input_tokens;
  return o;
}

// The `decoded` message for `hub` among those added to out.sends since index `first` (one per
// hub per step); a new one when there is none yet. The reference lasts until the next push.
stage::Decoded& decoded_for(worker::WorkerOutbox& out, size_t first, size_t hub) {
  for (size_t i = first; i < out.sends.size(); ++i) {
    if (out.sends[i].link == hub) return std::get<stage::Decoded>(out.sends[i].message);
  }
  out.sends.push_back({hub, {}, stage::Decoded{}});
  return std::get<stage::Decoded>(out.sends.back().message);
}

uint64_t micros_between(SteadyClock::time_point start, SteadyClock::time_point end) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(end - start).count());
}
}  // namespace

engine::DecodingOptions decoding_options(const protocol::GenerateParams& p, bool all_hypotheses) {
  engine::DecodingOptions o = engine::decoding_options(p);
  if (all_hypotheses) o.num_return_sequences = p.num_beams;
  return o;
}

DecoderStage::DecoderStage(std::shared_ptr<const engine::T5Model> model,
                           const DecoderOptions& options, metrics::StageMetrics& metrics,
                           const TimeSource& time)
    : model_(model),
      generator_(model, generator_options(options)),
      metrics_(metrics),
      time_(time),
      num_slots_(options.num_slots),
      max_source_len_(options.max_input_tokens),
      warmup_batch_size_(std::min(options.warmup_batch_size, options.num_slots)),
      warmup_steps_(std::min(4, options.max_new_tokens)),
      all_hypotheses_(options.all_hypotheses) {
  running_.reserve(static_cast<size_t>(num_slots_));
  finished_.reserve(static_cast<size_t>(num_slots_));
  metrics_.set_kv_slots(0, num_slots_);
}

bool DecoderStage::warm_up() {
  if (warmup_batch_size_ == 0) return false;
  const int64_t d_model = model_->config().d_model;
  const int64_t rows = std::max(1, max_source_len_ / 2);
  engine::EncoderOutput encoded;
  encoded.hidden = engine::Tensor::zeros({rows * warmup_batch_size_, d_model});
  for (int i = 0; i <= warmup_batch_size_; ++i) encoded.offsets.push_back(rows * i);
  engine::DecodingOptions options;
  options.max_new_tokens = warmup_steps_;
  options.min_new_tokens = warmup_steps_;  // every sequence runs every step
  const auto handles = generator_.add(
      encoded,
      std::vector<engine::DecodingOptions>(static_cast<size_t>(warmup_batch_size_), options));
  for (int step = 0; step < warmup_steps_ && generator_.active() > 0; ++step) {
    finished_.clear();
    generator_.step(finished_);
  }
  for (uint64_t h : handles) generator_.cancel(h);
  return true;
}

void DecoderStage::handle(stage::StageMessage&& message, worker::WorkerOutbox& out) {
  auto& items = std::get<stage::Decode>(message).items;
  metrics_.request(static_cast<double>(items.size()));
  int credits = 0;  // slots of items that never started: back to the batcher at once
  for (auto& item : items) admit(std::move(item), out, credits);
  if (credits > 0) out.answer(stage::Decoded{credits, {}});
  metrics_.set_in_flight(running());
  metrics_.set_kv_slots(num_slots_ - free_slots(), free_slots());
}

void DecoderStage::cancel(const stage::Cancel& message, worker::WorkerOutbox& out) {
  int credits = 0;
  for (const auto& request : message.requests) {
    for (size_t i = 0; i < running_.size();) {
      Running& r = running_[i];
      // Only the hub that sent a sequence cancels it (another batcher may run the same request).
      if (r.hub == out.hub && r.item.request == request.request &&
          r.item.gateway == request.gateway) {
        generator_.cancel(r.handle);
        credits += r.slots;
        metrics_.cancelled();
        spdlog::info("decoder: request {} item {} cancelled after {} us; {} slot(s) freed",
                     r.item.request, r.item.index, micros_between(r.started, time_.now().steady),
                     r.slots);
        r = std::move(running_.back());
        running_.pop_back();
      } else {
        ++i;
      }
    }
  }
  // Nothing found: it finished first, and its slots went back with its result.
  if (credits > 0) out.answer(stage::Decoded{credits, {}});
  metrics_.set_in_flight(running());
  metrics_.set_kv_slots(num_slots_ - free_slots(), free_slots());
}

void DecoderStage::admit(stage::EncodedItem&& item, worker::WorkerOutbox& out, int& credits) {
  const int slots = generation::slot_cost(item.params.num_beams);  // what the batcher charged
  const int64_t d_model = model_->config().d_model;
  // `decode` starts here: the copy of the encoder rows and the cross-attention keys and values
  // (Generator::add) are the decoder's work too, as they are part of the engine's generate.
  const Now now = time_.now();
  if (item.deadline.expired(now)) {
    metrics_.error(protocol::ErrorCode::kDeadlineExceeded);
    metrics_.expired_before_compute();
    credits += slots;
    return;
  }
  // The frame must hold exactly the header's rows of this model's d_model floats: a wrong size
  // (another model's encoder, a damaged frame) answers this item and nothing else.
  const stage::EncoderRows& rows = item.hidden;
  const std::span<const uint8_t> bytes = rows.values.bytes();
  if (rows.rows < 1 || rows.rows > max_source_len_ ||
      bytes.size() != static_cast<size_t>(rows.rows * d_model) * sizeof(float)) {
    credits += slots;
    out.fail(item,
             {protocol::ErrorCode::kInternal,
              "decoder received encoder rows that do not match the model: a frame of " +
                  std::to_string(bytes.size()) + " bytes for " + std::to_string(rows.rows) +
                  " rows of d_model " + std::to_string(d_model) + " float32 values (rows 1.." +
                  std::to_string(max_source_len_) + ")"},
             "decoder", metrics_);
    return;
  }
  engine::EncoderOutput encoded;
  encoded.hidden = engine::Tensor::empty({rows.rows, d_model});
  // The one copy on this side: from the frame as it arrived into the engine's tensor.
  std::memcpy(encoded.hidden.data(), bytes.data(), bytes.size());
  encoded.offsets = {0, rows.rows};
  try {
    engine::DecodingOptions options = decoding_options(item.params, all_hypotheses_);
    for (const auto& ids : item.stop_ids) options.stop_ids.emplace_back(ids.begin(), ids.end());
    const uint64_t handle = generator_.add(encoded, 0, options);
    // The result carries the output ids only (and the input text, when it travels).
    std::string text = std::move(item.text);
    auto decoded = stage::next_hop<stage::DecodedItem>(std::move(item));
    decoded.text = std::move(text);
    running_.push_back({handle, slots, std::move(decoded), now.steady, out.hub});
  } catch (const std::exception& e) {  // options the engine refuses, or no free slots (a hub bug)
    credits += slots;
    out.fail(item, {protocol::ErrorCode::kInternal, std::string("decoder: ") + e.what()}, "decoder",
             metrics_);
  }
}

void DecoderStage::work(worker::WorkerOutbox& out) {
  const auto start = time_.now().steady;
  finished_.clear();
  generator_.step(finished_);
  metrics_.compute_time(std::chrono::duration<double>(time_.now().steady - start).count());
  metrics_.batch_size(running());

  // One `decoded` message per hub with something finished or expired: results and slots go back
  // to the hub that sent the sequence.
  const size_t first = out.sends.size();
  for (auto& f : finished_) {
    auto it = std::find_if(running_.begin(), running_.end(),
                           [&](const Running& r) { return r.handle == f.handle; });
    if (it == running_.end()) continue;
    stage::DecodedItem& item = it->item;
    item.ids.assign(f.result.ids.begin(), f.result.ids.end());
    item.score = f.result.score;
    item.finish_reason = f.result.finish_reason;
    item.alternatives.clear();
    for (const auto& alt : f.result.alternatives)
      item.alternatives.emplace_back(alt.begin(), alt.end());
    item.alternative_scores = f.result.alternative_scores;
    item.timings.decode_us += micros_between(it->started, time_.now().steady);
    stage::Decoded& decoded = decoded_for(out, first, it->hub);
    decoded.credits += it->slots;
    decoded.items.push_back(std::move(item));
    *it = std::move(running_.back());
    running_.pop_back();
  }
  // Expired sequences stop costing compute now; the gateway has answered them.
  const Now now = time_.now();
  for (size_t i = 0; i < running_.size();) {
    if (running_[i].item.deadline.expired(now)) {
      generator_.cancel(running_[i].handle);
      metrics_.error(protocol::ErrorCode::kDeadlineExceeded);
      metrics_.expired_computing();
      decoded_for(out, first, running_[i].hub).credits += running_[i].slots;
      running_[i] = std::move(running_.back());
      running_.pop_back();
    } else {
      ++i;
    }
  }
  // Streamed sequences still running show their ids so far after every step: the lowest
  // latency, and a partial (the ids, a few hundred bytes) costs little next to a step. Only
  // streamed sequences pay for the copy.
  for (const Running& r : running_) {
    if (!r.item.stream) continue;
    const std::span<const int> ids = generator_.ids_so_far(r.handle);
    stage::DecodedItem partial;
    static_cast<stage::WorkHeader&>(partial) = r.item;
    partial.ids.assign(ids.begin(), ids.end());
    partial.text = r.item.text;  // the input, where the postprocessor rewrites words (else empty)
    partial.partial = true;
    decoded_for(out, first, r.hub).items.push_back(std::move(partial));
  }
  metrics_.set_in_flight(running());
  metrics_.set_kv_slots(num_slots_ - free_slots(), free_slots());
}

int DecoderStage::held(size_t hub) const {
  int slots = 0;
  for (const Running& r : running_) slots += r.hub == hub ? r.slots : 0;
  return slots;
}

}  // namespace seqpipe::decoder
