#include "seqpipe/engine/kv_cache.h"

#include <algorithm>

#include "ops.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

KvCache::KvCache(const T5Config& config, const KvCacheOptions& options, Device device,
                 DataType element)
    : options_(options), layers_(config.num_decoder_layers), inner_(config.inner_dim()) {
  if (element != DataType::kF32 && element != DataType::kBF16 && element != DataType::kF16) {
    throw EngineError("KvCache: elements are f32, bf16 or f16, not " +
                      std::string(data_type_name(element)));
  }
  if (options.num_slots < 1) throw EngineError("KvCacheOptions.num_slots must be >= 1");
  if (options.max_beams < 1) throw EngineError("KvCacheOptions.max_beams must be >= 1");
  if (options.max_target_len < 2) throw EngineError("KvCacheOptions.max_target_len must be >= 2");
  if (options.max_source_len < 1) throw EngineError("KvCacheOptions.max_source_len must be >= 1");
  if (options.num_slots > 4096 || options.max_beams > 64 || options.max_target_len > 4097 ||
      options.max_source_len > 65536) {
    throw EngineError(
        "KvCacheOptions: num_slots <= 4096, max_beams <= 64, max_target_len <= 4097, "
        "max_source_len <= 65536");
  }
  const int64_t slots = options.num_slots;
  self_k_ = Tensor::empty({slots * layers_ * options.max_target_len, inner_}, device, element);
  self_v_ = Tensor::empty({slots * layers_ * options.max_target_len, inner_}, device, element);
  cross_k_ = Tensor::empty({slots * layers_ * options.max_source_len, inner_}, device, element);
  cross_v_ = Tensor::empty({slots * layers_ * options.max_source_len, inner_}, device, element);
  const int64_t staged = std::min<int64_t>(options.max_beams, slots);
  scratch_k_ = Tensor::empty({staged * layers_ * options.max_target_len, inner_}, device, element);
  scratch_v_ = Tensor::empty({staged * layers_ * options.max_target_len, inner_}, device, element);
  scratch_length_.assign(static_cast<size_t>(staged), 0);
  copies_.reserve(static_cast<size_t>(std::max<int64_t>(staged, 1) * layers_ * 2));
  length_.assign(static_cast<size_t>(slots), 0);
  source_length_.assign(static_cast<size_t>(slots), 0);
  free_.reserve(static_cast<size_t>(slots));
  held_.assign(static_cast<size_t>(slots), 0);
  for (int s = options.num_slots - 1; s >= 0; --s) free_.push_back(s);  // hand out 0 first
}

uint64_t KvCache::bytes() const {
  return static_cast<uint64_t>(self_k_.bytes() + self_v_.bytes() + cross_k_.bytes() +
                               cross_v_.bytes() + scratch_k_.bytes() + scratch_v_.bytes());
}

std::optional<int> KvCache::acquire() {
  if (free_.empty()) return std::nullopt;
  const int slot = free_.back();
  free_.pop_back();
  held_[static_cast<size_t>(slot)] = 1;
  length_[static_cast<size_t>(slot)] = 0;
  source_length_[static_cast<size_t>(slot)] = 0;
  return slot;
}

void KvCache::release(int slot) {
  if (!held(slot))
    throw EngineError("KvCache::release: slot " + std::to_string(slot) + " is not held");
  held_[static_cast<size_t>(slot)] = 0;
  free_.push_back(slot);  // capacity reserved to num_slots: no allocation
}

void KvCache::set_length(int slot, int64_t len) {
  if (slot < 0 || slot >= options_.num_slots || len < 0 || len > options_.max_target_len) {
    throw EngineError("KvCache::set_length: slot " + std::to_string(slot) + ", length " +
                      std::to_string(len));
  }
  length_[static_cast<size_t>(slot)] = len;
}

void KvCache::set_source_length(int slot, int64_t len) {
  if (slot < 0 || slot >= options_.num_slots || len < 0 || len > options_.max_source_len) {
    throw EngineError("KvCache::set_source_length: slot " + std::to_string(slot) + ", length " +
                      std::to_string(len));
  }
  source_length_[static_cast<size_t>(slot)] = len;
}

TensorView KvCache::self_k(int slot, int64_t layer) const {
  return self_k_.rows((slot * layers_ + layer) * options_.max_target_len, options_.max_target_len);
}
TensorView KvCache::self_v(int slot, int64_t layer) const {
  return self_v_.rows((slot * layers_ + layer) * options_.max_target_len, options_.max_target_len);
}
TensorView KvCache::cross_k(int slot, int64_t layer) const {
  return cross_k_.rows((slot * layers_ + layer) * options_.max_source_len, options_.max_source_len);
}
TensorView KvCache::cross_v(int slot, int64_t layer) const {
  return cross_v_.rows((slot * layers_ + layer) * options_.max_source_len, options_.max_source_len);
}

void KvCache::reorder(const int* dst, const int* src, int n) {
  if (n > static_cast<int>(scratch_length_.size()))
    throw EngineError("KvCache::reorder: more pairs than max_beams");
  const int64_t block = options_.max_target_len;  // rows of one layer of one slot
  // Stage every source that moves, then write: a slot may be both a source and a destination.
  copies_.clear();
  for (int i = 0; i < n; ++i) {
    if (dst[i] == src[i]) continue;
    const int64_t len = length(src[i]);
    scratch_length_[static_cast<size_t>(i)] = len;
    for (int64_t l = 0; l < layers_; ++l) {
      const int64_t staged = (i * layers_ + l) * block;
      copies_.push_back({scratch_k_.rows(staged, len), self_k(src[i], l).rows(0, len)});
      copies_.push_back({scratch_v_.rows(staged, len), self_v(src[i], l).rows(0, len)});
    }
  }
  ops::copy_all(copies_);
  copies_.clear();
  for (int i = 0; i < n; ++i) {
    if (dst[i] == src[i]) continue;
    const int64_t len = scratch_length_[static_cast<size_t>(i)];
    for (int64_t l = 0; l < layers_; ++l) {
      const int64_t staged = (i * layers_ + l) * block;
      copies_.push_back({self_k(dst[i], l).rows(0, len), scratch_k_.rows(staged, len)});
      copies_.push_back({self_v(dst[i], l).rows(0, len), scratch_v_.rows(staged, len)});
    }
    set_length(dst[i], len);
  }
  ops::copy_all(copies_);
}

void KvCache::copy_cross(int dst, int src) {
  const int64_t len = source_length(src);
  copies_.clear();
  for (int64_t l = 0; l < layers_; ++l) {
    copies_.push_back({cross_k(dst, l).rows(0, len), cross_k(src, l).rows(0, len)});
    copies_.push_back({cross_v(dst, l).rows(0, len), cross_v(src, l).rows(0, len)});
  }
  ops::copy_all(copies_);
  set_source_length(dst, len);
}

}  // namespace seqpipe::engine
