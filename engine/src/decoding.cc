#include "seqpipe/engine/decoding.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <string>

#include "ops.h"
#include "search.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/logits_processors.h"
#include "seqpipe/engine/profiler.h"

namespace seqpipe::engine {

void SearchStrategy::advance_to(int) {
  throw EngineError("SearchStrategy::advance_to: this search reads its logits");
}

void SearchStrategy::advance_top_k(const int*, const float*, int, KvCache&) {
  throw EngineError("SearchStrategy::advance_top_k: this search reads its logits");
}

namespace {

// The engine's value of a range's named upper bound: the hard limits (a server configures lower
// ones, which the protocol checks before a request gets here).
double engine_upper(const generation::OptionRange& r) {
  switch (r.upper) {
    case generation::UpperBound::kMaxNewTokens:
      return generation::kMaxNewTokens;
    case generation::UpperBound::kMaxBeams:
      return generation::kMaxBeams;
    default:
      return r.hi;
  }
}

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

[[noreturn]] void fail(const std::string& what) {
  throw EngineError("decoding options: " + what);
}

void check_int(const char* name, int value, const generation::OptionRange& r) {
  if (generation::in_range(r, value, engine_upper(r))) return;
  fail(std::string(name) + " must be in [" + number_text(r.lo) + ", " +
       number_text(engine_upper(r)) + "], got " + std::to_string(value));
}

void check_float(const char* name, float value, const generation::OptionRange& r) {
  if (std::isfinite(value) && generation::in_range(r, value, engine_upper(r))) return;
  const std::string lo = (r.lo_open ? "(" : "[") + number_text(r.lo);
  if (std::isinf(r.lo)) fail(std::string(name) + " must be a finite number");
  if (std::isinf(r.hi))
    fail(std::string(name) + " must be a finite number " + (r.lo_open ? "> " : ">= ") +
         number_text(r.lo));
  fail(std::string(name) + " must be in " + lo + ", " + number_text(r.hi) + "]");
}

}  // namespace

DecodingOptions decoding_options(const generation::SearchOptions& s) {
  DecodingOptions o;
  o.max_new_tokens = s.max_new_tokens;
  o.num_beams = s.num_beams;
  o.length_penalty = s.length_penalty;
  o.min_new_tokens = s.min_new_tokens;
  o.return_scores = s.return_scores;
  o.num_return_sequences = s.num_return_sequences;
  o.repetition_penalty = s.repetition_penalty;
  o.no_repeat_ngram_size = s.no_repeat_ngram_size;
  o.do_sample = s.do_sample;
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.top_p = s.top_p;
  o.seed = s.seed;
  return o;
}

void DecodingOptions::validate(int64_t max_target_len) const {
  namespace range = generation::range;
  check_int("max_new_tokens", max_new_tokens, range::kMaxNewTokens);
  if (int64_t{max_new_tokens} + 1 > max_target_len) {
    fail("max_new_tokens " + std::to_string(max_new_tokens) + " exceeds the KV cache's limit of " +
         std::to_string(max_target_len - 1));
  }
  check_int("min_new_tokens", min_new_tokens, range::kMinNewTokens);
  if (min_new_tokens > max_new_tokens) {
    fail("min_new_tokens must be in [0, max_new_tokens], got " + std::to_string(min_new_tokens));
  }
  check_int("num_beams", num_beams, range::kNumBeams);
  check_float("length_penalty", length_penalty, range::kLengthPenalty);
  check_int("num_return_sequences", num_return_sequences, range::kNumReturnSequences);
  if (num_return_sequences > num_beams) {
    fail("num_return_sequences must be in [1, num_beams], got " +
         std::to_string(num_return_sequences));
  }
  check_float("repetition_penalty", repetition_penalty, range::kRepetitionPenalty);
  check_int("no_repeat_ngram_size", no_repeat_ngram_size, range::kNoRepeatNgramSize);
  if (do_sample && num_beams != 1) fail("do_sample needs num_beams 1 (beam sampling is not done)");
  check_float("temperature", temperature, range::kTemperature);
  check_int("top_k", top_k, range::kTopK);
  check_float("top_p", top_p, range::kTopP);
}

Generator::Generator(std::shared_ptr<const T5Model> model, const GeneratorOptions& options)
    : model_(std::move(model)),
      cache_(model_->config(), options.cache, model_->device(),
             ops::kv_cache_type(model_->device(), model_->compute_type())),
      decoder_(model_, cache_) {
  const size_t n = static_cast<size_t>(cache_.num_slots());
  // The searches read the logits on the host: a model elsewhere copies them into this buffer.
  if (model_->device() != Device::kCpu)
    host_logits_ = Tensor::empty({cache_.num_slots(), model_->config().vocab_size});
  active_.reserve(n);
  step_slots_.resize(n);
  step_tokens_.resize(n);
  row_of_.resize(n);
  banned_.resize(n);
  chosen_.resize(n);
  top_ids_.resize(n * ops::kMaxTopK);
  top_logprobs_.resize(n * ops::kMaxTopK);
}

const EncoderOutput& Generator::on_model_device(const EncoderOutput& encoded,
                                                EncoderOutput& staged) {
  const Device device = model_->device();
  if (!encoded.hidden.defined() || encoded.hidden.device() == device) return encoded;
  const int64_t rows = encoded.hidden.dim(0), width = encoded.hidden.dim(1);
  if (!device_hidden_.defined() || device_hidden_.numel() < rows * width)
    device_hidden_ = Tensor::empty({std::max<int64_t>(rows, 1) * width}, device);
  staged.offsets = encoded.offsets;
  staged.hidden = Tensor::wrap(device_hidden_.data(), {rows, width}, DataType::kF32, device, {});
  ops::copy_to(staged.hidden, encoded.hidden);
  return staged;
}

bool Generator::can_admit(const DecodingOptions& options) const {
  return cache_.free_slots() >= generation::slot_cost(options.num_beams) &&
         options.num_beams <= cache_.options().max_beams;
}

void Generator::check_admission(const EncoderOutput& encoded, size_t index,
                                const DecodingOptions& options) const {
  options.validate(cache_.options().max_target_len);
  if (!encoded.valid(model_->config().d_model))
    throw EngineError("Generator::add: malformed EncoderOutput");
  if (index >= encoded.size())
    throw EngineError("Generator::add: no encoder output " + std::to_string(index));
  if (options.num_beams > cache_.options().max_beams) {
    throw EngineError("decoding options: num_beams " + std::to_string(options.num_beams) +
                      " exceeds the KV cache's max_beams " +
                      std::to_string(cache_.options().max_beams));
  }
  const int64_t source_len = encoded.length(index);
  if (source_len > cache_.options().max_source_len) {
    throw EngineError("input of " + std::to_string(source_len) +
                      " tokens exceeds the KV cache's max_source_len " +
                      std::to_string(cache_.options().max_source_len));
  }
}

Generator::Active Generator::prepare(const int* slots, const DecodingOptions& options) {
  for (int b = 1; b < options.num_beams; ++b) {
    cache_.copy_cross(slots[b], slots[0]);
    cache_.set_length(slots[b], 0);
  }
  return {next_handle_++, make_search(slots, options, model_->config())};
}

uint64_t Generator::add(const EncoderOutput& encoded, size_t index,
                        const DecodingOptions& options) {
  return add_prepared(encoded, {index}, {options}).front();
}

std::vector<uint64_t> Generator::add(const EncoderOutput& encoded,
                                     const std::vector<DecodingOptions>& options) {
  if (options.size() != encoded.size()) {
    throw EngineError("Generator::add: " + std::to_string(options.size()) + " option sets for " +
                      std::to_string(encoded.size()) + " sequences");
  }
  std::vector<size_t> indices(options.size());
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = i;
  return add_prepared(encoded, indices, options);
}

std::vector<uint64_t> Generator::add_prepared(const EncoderOutput& sent,
                                              const std::vector<size_t>& indices,
                                              const std::vector<DecodingOptions>& options) {
  int needed = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    check_admission(sent, indices[i], options[i]);
    needed += generation::slot_cost(options[i].num_beams);
  }
  if (cache_.free_slots() < needed) {
    throw EngineError("Generator::add: " + std::to_string(needed) + " slots needed, " +
                      std::to_string(cache_.free_slots()) + " free");
  }
  EncoderOutput staged;
  const EncoderOutput& encoded = on_model_device(sent, staged);
  // All or none: anything that throws below releases every slot taken here, and no sequence
  // joins the batch until all are ready.
  std::vector<int> slots;
  std::vector<Active> ready;
  std::vector<uint64_t> handles;
  try {
    slots.reserve(static_cast<size_t>(needed));
    ready.reserve(indices.size());
    handles.reserve(indices.size());
    std::vector<size_t> first(indices.size());
    for (size_t i = 0; i < indices.size(); ++i) {
      first[i] = slots.size();
      for (int b = 0; b < options[i].num_beams; ++b) slots.push_back(*cache_.acquire());
    }
    if (indices.size() == encoded.size()) {
      std::vector<int> first_slots(indices.size());
      for (size_t i = 0; i < indices.size(); ++i) first_slots[indices[i]] = slots[first[i]];
      decoder_.start(encoded, first_slots.data());  // one GEMM per layer for the whole batch
    } else {
      for (size_t i = 0; i < indices.size(); ++i) {
        decoder_.start(slots[first[i]], encoded.sequence(indices[i]));
      }
    }
    for (size_t i = 0; i < indices.size(); ++i) {
      ready.push_back(prepare(&slots[first[i]], options[i]));
      handles.push_back(ready.back().handle);
    }
  } catch (...) {
    for (int s : slots) cache_.release(s);
    throw;
  }
  for (Active& a : ready) active_.push_back(std::move(a));  // capacity reserved: cannot throw
  return handles;
}

bool Generator::cancel(uint64_t handle) {
  for (auto it = active_.begin(); it != active_.end(); ++it) {
    if (it->handle != handle) continue;
    for (int i = 0; i < it->search->num_slots(); ++i) cache_.release(it->search->slots()[i]);
    active_.erase(it);
    return true;
  }
  return false;
}

std::span<const int> Generator::ids_so_far(uint64_t handle) const {
  for (const Active& a : active_) {
    if (a.handle == handle) return a.search->ids_so_far();
  }
  return {};
}

void Generator::advance_searches(const TensorView& logits) {
  // Plain greedy searches take ops::argmax's choice, beam searches without processors
  // ops::top_k_log_softmax's candidates (one call, the largest k: a smaller k is its prefix);
  // the rest read their rows on the host.
  const int n = static_cast<int>(logits.dim(0));
  bool any_argmax = false, any_logits = false;
  int top_k = 0;
  std::fill(banned_.begin(), banned_.begin() + n, -1);
  for (size_t a = 0; a < active_.size(); ++a) {
    const SearchStrategy& s = *active_[a].search;
    if (s.top_k_candidates() > 0) {
      top_k = std::max(top_k, s.top_k_candidates());
    } else if (s.needs_logits()) {
      any_logits = true;
    } else {
      any_argmax = true;
      banned_[static_cast<size_t>(row_of_[a])] = s.banned_token();
    }
  }
  if (any_argmax) ops::argmax(logits, banned_.data(), chosen_.data());
  if (top_k > 0) ops::top_k_log_softmax(logits, top_k, top_ids_.data(), top_logprobs_.data());
  TensorView rows = logits;
  if (any_logits && host_logits_.defined()) {
    rows = host_logits_.rows(0, n);
    ops::copy_to(rows, logits);
  }
  const int64_t vocab = logits.dim(1);
  for (size_t a = 0; a < active_.size(); ++a) {
    SearchStrategy& s = *active_[a].search;
    const int row = row_of_[a];
    if (top_k > 0 && s.top_k_candidates() > 0) {
      const size_t first = static_cast<size_t>(row) * static_cast<size_t>(top_k);
      s.advance_top_k(top_ids_.data() + first, top_logprobs_.data() + first, top_k, cache_);
    } else if (s.needs_logits()) {
      s.advance(rows.row(row), vocab, cache_);
    } else {
      s.advance_to(chosen_[static_cast<size_t>(row)]);
    }
  }
}

void Generator::step(std::vector<Finished>& finished) {
  if (active_.empty()) return;
  int n = 0;
  for (size_t a = 0; a < active_.size(); ++a) {
    const SearchStrategy& s = *active_[a].search;
    row_of_[a] = n;
    for (int i = 0; i < s.num_slots(); ++i, ++n) {
      step_slots_[static_cast<size_t>(n)] = s.slots()[i];
      step_tokens_[static_cast<size_t>(n)] = s.next_tokens()[i];
    }
  }
  const TensorView logits = decoder_.step(step_slots_.data(), step_tokens_.data(), n);
  advance_searches(logits);
  // Finished sequences leave at once, freeing their slots for the next step. First the results
  // (may throw on out of memory: then nothing changed), then the removal (cannot throw).
  const size_t before = finished.size();
  try {
    for (const Active& a : active_) {
      if (a.search->done()) finished.push_back({a.handle, a.search->result()});
    }
  } catch (...) {
    finished.resize(before);
    throw;
  }
  size_t kept = 0;
  for (size_t a = 0; a < active_.size(); ++a) {
    SearchStrategy& s = *active_[a].search;
    if (s.done()) {
      for (int i = 0; i < s.num_slots(); ++i) cache_.release(s.slots()[i]);
    } else {
      if (kept != a) active_[kept] = std::move(active_[a]);
      ++kept;
    }
  }
  active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(kept), active_.end());
}

std::vector<GenerationResult> generate(std::shared_ptr<const T5Model> model,
                                       const std::vector<std::vector<int>>& batch,
                                       const DecodingOptions& options) {
  options.validate(int64_t{generation::kMaxNewTokens} + 1);
  if (batch.empty()) return {};
  Encoder encoder(model);
  EncoderOutput encoded = encoder.encode(batch);
  int64_t longest = 1;
  for (size_t i = 0; i < encoded.size(); ++i) longest = std::max(longest, encoded.length(i));
  GeneratorOptions go;
  go.cache.num_slots = static_cast<int>(batch.size()) * options.num_beams;
  go.cache.max_beams = options.num_beams;
  go.cache.max_target_len = options.max_new_tokens + 1;
  go.cache.max_source_len = longest;
  Generator gen(model, go);
  const std::vector<uint64_t> handles =
      gen.add(encoded, std::vector<DecodingOptions>(batch.size(), options));
  std::vector<Generator::Finished> finished;
  finished.reserve(batch.size());
  while (gen.active() > 0) gen.step(finished);
  std::vector<GenerationResult> results(batch.size());
  for (auto& f : finished) results[f.handle - handles.front()] = std::move(f.result);
  return results;
}

}  // namespace seqpipe::engine
