#pragma once
// A T5 checkpoint loaded from a HuggingFace model directory (config.json + model.safetensors).
// Weights are memory-mapped; fp32 tensors are used in place, F16/BF16 are converted at load.
// The loaded model is immutable and may be shared by any number of Encoders and Decoders.
#include <memory>
#include <string>
#include <vector>

#include "seqpipe/engine/device.h"
#include "seqpipe/engine/t5_config.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine {

struct ModelOptions {
  // Threads for the BLAS and the engine's kernels; 0 keeps the BLAS default (all cores).
  int threads = 0;
  Device device = Device::kCpu;
};

struct AttentionWeights {
  Tensor q, k, v, o;  // [inner, d_model] x3, o: [d_model, inner]
};

struct FeedForwardWeights {
  Tensor wi;    // relu: wi [d_ff, d_model]; gated: wi_0 (the gelu branch)
  Tensor wi_1;  // gated only: the linear branch
  Tensor wo;    // [d_model, d_ff]
};

struct EncoderBlockWeights {
  Tensor attention_norm;
  AttentionWeights attention;
  Tensor ffn_norm;
  FeedForwardWeights ffn;
};

struct DecoderBlockWeights {
  Tensor self_attention_norm;
  AttentionWeights self_attention;
  Tensor cross_attention_norm;
  AttentionWeights cross_attention;
  Tensor ffn_norm;
  FeedForwardWeights ffn;
};

// Relative position bias, expanded at load from the first layer's bucket table:
// value(head, rel) for rel = key_pos - query_pos in [-max_distance, max_distance], rel clamped
// (the bucket is constant past max_distance). Stored [num_heads, 2 * max_distance + 1].
struct PositionBias {
  Tensor table;
  int64_t max_distance = 0;
};

class T5Model {
 public:
  // Throws EngineError naming the file, tensor or key at fault.
  static std::shared_ptr<const T5Model> load(const std::string& dir,
                                             const ModelOptions& options = {});

  const T5Config& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  Device device() const { return options_.device; }
  const ModelOptions& options() const { return options_; }

  const Tensor& shared_embedding() const { return shared_; }  // [vocab, d_model]
  const Tensor& lm_head() const { return lm_head_; }          // [vocab, d_model]
  const std::vector<EncoderBlockWeights>& encoder_blocks() const { return encoder_; }
  const std::vector<DecoderBlockWeights>& decoder_blocks() const { return decoder_; }
  const Tensor& encoder_final_norm() const { return encoder_final_norm_; }
  const Tensor& decoder_final_norm() const { return decoder_final_norm_; }
  const PositionBias& encoder_position_bias() const { return encoder_bias_; }
  const PositionBias& decoder_position_bias() const { return decoder_bias_; }
  // Bytes of weights used in place from the file mapping, and bytes converted into memory.
  uint64_t mapped_weight_bytes() const { return mapped_bytes_; }
  uint64_t converted_weight_bytes() const { return converted_bytes_; }

 private:
  T5Model() = default;

  std::string dir_;
  ModelOptions options_;
  T5Config config_;
  Tensor shared_, lm_head_;
  std::vector<EncoderBlockWeights> encoder_;
  std::vector<DecoderBlockWeights> decoder_;
  Tensor encoder_final_norm_, decoder_final_norm_;
  PositionBias encoder_bias_, decoder_bias_;
  uint64_t mapped_bytes_ = 0;
  uint64_t converted_bytes_ = 0;
};

// T5's relative position bucket (HF T5Attention._relative_position_bucket), rel = key - query.
int relative_position_bucket(int64_t rel, bool bidirectional, int64_t num_buckets,
                             int64_t max_distance);

}  // namespace seqpipe::engine
