#pragma once
// The T5 encoder stack over a batch of variable-length sequences. Sequences are packed
// row after row (no padding rows), so the GEMMs do no work for padding; attention keeps each
// sequence to its own rows, which is what HF's padding mask does.
#include <cstdint>
#include <memory>
#include <vector>

#include "seqpipe/engine/model.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine {

struct EncoderOutput {
  Tensor hidden;                 // [total_tokens, d_model], after the final layer norm
  std::vector<int64_t> offsets;  // sequence i is rows [offsets[i], offsets[i+1])

  size_t size() const { return offsets.empty() ? 0 : offsets.size() - 1; }
  int64_t length(size_t i) const { return offsets[i + 1] - offsets[i]; }
  // Sequence i's rows [length(i), d_model], on the model's device.
  TensorView sequence(size_t i) const { return hidden.rows(offsets[i], length(i)); }
  // Sequence i's rows copied into host memory (length(i) * d_model floats), from any device.
  void copy_sequence(size_t i, float* dst) const;
  // Offsets start at 0, grow strictly (no empty sequence) and stay within hidden's rows, whose
  // width is d_model. What Encoder::encode returns always is; a hand-built one is checked.
  bool valid(int64_t d_model) const;
};

class Encoder {
 public:
  explicit Encoder(std::shared_ptr<const T5Model> model);
  Encoder(const Encoder&) = delete;  // the workspace is not shareable between threads
  Encoder& operator=(const Encoder&) = delete;

  // Throws EngineError for an empty sequence or a token id outside the vocabulary.
  // Not thread-safe: the encoder reuses its workspace between calls (it grows, never shrinks).
  EncoderOutput encode(const std::vector<std::vector<int>>& batch);

 private:
  struct Workspace;
  std::shared_ptr<const T5Model> model_;
  std::shared_ptr<Workspace> ws_;
};

}  // namespace seqpipe::engine
