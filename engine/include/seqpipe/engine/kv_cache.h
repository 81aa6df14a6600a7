#pragma once
// The decoder's key/value cache as a pool of slots. A sequence (or each beam of a beam search)
// holds one slot from its first decoder step to its last; the slot keeps the self-attention K/V
// of every position so far and the cross-attention K/V computed once from the encoder output.
// Memory is allocated once, at construction, on the model's device, and bounded by num_slots;
// its elements are f32, or the model's bf16 / fp16 on a GPU (half the bytes).
#include <cstdint>
#include <optional>
#include <vector>

#include "seqpipe/engine/t5_config.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine {

// Upper bounds keep every size computation far from overflow.
struct KvCacheOptions {
  int num_slots = 32;            // sequences (beams) decoded at once
  int max_beams = 8;             // largest num_beams a sequence may use (sizes the reorder scratch)
  int64_t max_target_len = 64;   // decoder positions per slot, the start token included
  int64_t max_source_len = 128;  // encoder tokens per slot (cross-attention K/V)
};

class KvCache {
 public:
  // element: f32, or bf16 / f16 where the device's decoder reads a half cache (the Generator
  // passes ops::kv_cache_type: on a GPU, the model's half compute type; a Decoder refuses a
  // half cache its device does not read).
  KvCache(const T5Config& config, const KvCacheOptions& options, Device device = Device::kCpu,
          DataType element = DataType::kF32);

  const KvCacheOptions& options() const { return options_; }
  Device device() const { return self_k_.device(); }
  DataType dtype() const { return self_k_.dtype(); }
  int num_slots() const { return options_.num_slots; }
  int free_slots() const { return static_cast<int>(free_.size()); }
  uint64_t bytes() const;

  // A free slot, or nullopt when all are held. acquire/release allocate nothing; releasing a
  // slot that is not held is an EngineError (it would hand one slot to two sequences).
  std::optional<int> acquire();
  void release(int slot);
  bool held(int slot) const {
    return slot >= 0 && slot < options_.num_slots && held_[static_cast<size_t>(slot)];
  }

  // Positions filled in the slot's self-attention cache, and the encoder length it attends to.
  int64_t length(int slot) const { return length_[static_cast<size_t>(slot)]; }
  void set_length(int slot, int64_t len);  // EngineError outside [0, max_target_len]
  int64_t source_length(int slot) const { return source_length_[static_cast<size_t>(slot)]; }
  void set_source_length(int slot, int64_t len);  // EngineError outside [0, max_source_len]

  // One slot's layer: self K/V [max_target_len, inner_dim], cross K/V [max_source_len,
  // inner_dim]; the first length() / source_length() rows are filled.
  TensorView self_k(int slot, int64_t layer) const;
  TensorView self_v(int slot, int64_t layer) const;
  TensorView cross_k(int slot, int64_t layer) const;
  TensorView cross_v(int slot, int64_t layer) const;

  // Beam search reordering: slot dst[i] takes the self-attention state of slot src[i] (all pairs
  // are read before any is written; the dst are distinct). n <= options().max_beams.
  void reorder(const int* dst, const int* src, int n);
  // Copies the cross-attention state (and source length) of one slot to another.
  void copy_cross(int dst, int src);

 private:
  KvCacheOptions options_;
  int64_t layers_ = 0;
  int64_t inner_ = 0;
  Tensor self_k_, self_v_, cross_k_, cross_v_;  // [slots * layers * len, inner]
  Tensor scratch_k_, scratch_v_;  // reorder staging, [max_beams * layers * len, inner]
  std::vector<int64_t> scratch_length_;
  std::vector<TensorCopy> copies_;  // one batch of reorder's or copy_cross's copies
  std::vector<int64_t> length_, source_length_;
  std::vector<int> free_;
  std::vector<uint8_t> held_;
};

}  // namespace seqpipe::engine
