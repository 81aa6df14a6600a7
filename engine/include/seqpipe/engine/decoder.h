#pragma once
// One incremental step of the T5 decoder for a batch of KV-cache slots, each at its own
// position: continuous (iteration-level) batching needs nothing more. All buffers are sized
// at construction for the cache's slot count, on the model's device; step() allocates nothing.
#include <memory>

#include "seqpipe/engine/encoder.h"
#include "seqpipe/engine/kv_cache.h"
#include "seqpipe/engine/model.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine {

class Decoder {
 public:
  Decoder(std::shared_ptr<const T5Model> model, KvCache& cache);
  Decoder(const Decoder&) = delete;  // holds a reference to its cache
  Decoder& operator=(const Decoder&) = delete;

  // Prepares `slot` for a new sequence: computes the cross-attention K/V of every layer from
  // the sequence's encoder rows [source_len, d_model] and empties its self-attention cache.
  void start(int slot, const TensorView& encoder_rows);
  // The same for every sequence of an encoder batch at once (sequence i into slots[i]): one GEMM
  // per layer over all encoder rows instead of one per sequence.
  void start(const EncoderOutput& encoded, const int* slots);

  // Feeds token[i] to slot[i] at that slot's next position (n <= cache.num_slots()).
  // Returns the logits [n, vocab] on the model's device; valid until the next step().
  TensorView step(const int* slots, const int* tokens, int n);

  const T5Model& model() const { return *model_; }
  KvCache& cache() { return cache_; }

 private:
  // Every layer's cross-attention K/V of the packed encoder rows (sequence i: rows offsets[i] to
  // offsets[i + 1]) in one GEMM, then into slots[i]'s cache rows.
  void fill_cross(const TensorView& encoder_rows, const int64_t* offsets, size_t count,
                  const int* slots);
  // The rows' every-layer K/V [rows, layers x 2 x inner] from the one GEMM (fp32), in the
  // cache's element type (converted when that is half); valid until the next call.
  TensorView cross_kv_rows(const TensorView& encoder_rows);

  struct Workspace;
  std::shared_ptr<const T5Model> model_;
  KvCache& cache_;
  std::shared_ptr<Workspace> ws_;
};

}  // namespace seqpipe::engine
