#pragma once
// A T5 checkpoint loaded from a HuggingFace model directory (config.json + model.safetensors).
// Weights are read into memory of its own (an overwrite of the file cannot reach them); fp32
// tensors are used as stored, F16/BF16 converted at load. The linear layers' weights are then
// converted once to the compute type (compute_type.h), except a BF16 checkpoint's in bfloat16:
// those are taken as stored (as read for the portable kernels, reordered into oneDNN's layout).
// The loaded model is immutable and may be shared by any number of Encoders and Decoders.
#include <memory>
#include <string>
#include <vector>

#include "seqpipe/engine/compute_type.h"
#include "seqpipe/engine/device.h"
#include "seqpipe/engine/t5_config.h"
#include "seqpipe/engine/tensor.h"

namespace seqpipe::engine {

// Which kernels run the bf16 / int8 linear layers.
enum class CpuKernels {
  kBest,      // oneDNN's where this CPU has AVX512_BF16 (bf16) or VNNI (int8), else kPortable
  kPortable,  // the engine's own vectorised loops only: what a CPU without them (AVX2) runs;
              // tests force it to check that path on any machine
};

struct ModelOptions {
  // Threads for the BLAS and the engine's kernels; 0 keeps the BLAS default (all cores).
  int threads = 0;
  Device device = Device::kCpu;
  int device_index = 0;  // which GPU, for Device::kCuda ("cuda:N")
  // The linear layers' number type (compute_type.h). Default float32: exactly the checkpoint's
  // arithmetic; int8 is the fastest and agrees with it on most greedy outputs
  // (docs/PERFORMANCE.md).
  ComputeType compute_type = ComputeType::kFloat32;
  CpuKernels cpu_kernels = CpuKernels::kBest;
  // On a GPU: record each decoder step's ops once per batch size as a CUDA graph and replay it
  // (a step is ~100 small kernels, whose launches a graph saves); false issues every op as it
  // comes. No effect on the CPU.
  bool cuda_graphs = true;

  // The device as a DeviceSpec (device, device_index).
  DeviceSpec device_spec() const { return {device, device_index}; }
};

// A weight in the layout a device's library reads (the CPU: oneDNN's packed layout,
// src/cpu/onednn.h), made once at load by the device's backend.
class PackedWeight {
 public:
  virtual ~PackedWeight() = default;
  virtual int64_t bytes() const = 0;
};

// A linear layer's weight W [out, in] (y = x W^T, HF's nn.Linear layout) in the compute type.
// float32: the checkpoint's tensor used in place (on an AVX-512 CPU with CpuKernels::kBest: only
// a copy packed for src/cpu/packed_gemm.cc, in `packed`). bfloat16 / int8: converted once at load
// (a BF16 checkpoint's weight in the bfloat16 type: used as stored); int8 per output channel, W[j]
// ~ weight[j] * scales[j]. Where oneDNN runs the type on this CPU the weights are kept only in its
// packed layout (`packed`, `weight` empty); else row-major in `weight` for the engine's own
// kernels. All of it on `device`.
struct LinearWeight {
  DataType dtype = DataType::kF32;
  Device device = Device::kCpu;
  int64_t out = 0, in = 0;
  Tensor weight;
  Tensor scales;  // int8: [out] fp32
  std::shared_ptr<const PackedWeight> packed;

  bool defined() const { return out > 0; }
  int64_t bytes() const;  // weights and scales as stored
};

// A self-attention (the encoder's, the decoder's) has qkv and o: q, k and v concatenated at load
// ([3 inner, d_model], one GEMM a layer or a step). The decoder's cross-attention has q and o,
// every layer's k and v being T5Model::decoder_cross_kv() (one GEMM when a request joins).
// The concatenated weights are copies, never used in place from the mapping.
struct AttentionWeights {
  LinearWeight q, o;  // q: [inner, d_model] (cross-attention only), o: [d_model, inner]
  LinearWeight qkv;   // [3 inner, d_model]: q's rows, then k's, then v's (self-attention only)
};

struct FeedForwardWeights {
  LinearWeight wi;    // relu: wi [d_ff, d_model]; gated: wi_0 (the gelu branch)
  LinearWeight wi_1;  // gated only: the linear branch
  LinearWeight wo;    // [d_model, d_ff]
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
  // As given, except compute_type: the type in use (auto resolved for this CPU).
  const ModelOptions& options() const { return options_; }
  ComputeType compute_type() const { return options_.compute_type; }

  const Tensor& shared_embedding() const { return shared_; }  // [vocab, d_model], fp32
  const LinearWeight& lm_head() const { return lm_head_; }    // [vocab, d_model]
  const std::vector<EncoderBlockWeights>& encoder_blocks() const { return encoder_; }
  const std::vector<DecoderBlockWeights>& decoder_blocks() const { return decoder_; }
  const Tensor& encoder_final_norm() const { return encoder_final_norm_; }
  const Tensor& decoder_final_norm() const { return decoder_final_norm_; }
  const PositionBias& encoder_position_bias() const { return encoder_bias_; }
  const PositionBias& decoder_position_bias() const { return decoder_bias_; }
  // Every decoder layer's cross-attention k and v, [layers * 2 inner, d_model]: layer l's k rows
  // from 2 l inner, its v rows after them.
  const LinearWeight& decoder_cross_kv() const { return cross_kv_; }
  // Bytes of weights used as the file stores them ("mapped": named when they were mapped), and
  // bytes converted (from F16/BF16 checkpoints to fp32, and to the compute type).
  uint64_t mapped_weight_bytes() const { return mapped_bytes_; }
  uint64_t converted_weight_bytes() const { return converted_bytes_; }

 private:
  T5Model() = default;

  std::string dir_;
  ModelOptions options_;
  T5Config config_;
  Tensor shared_;
  LinearWeight lm_head_;
  std::vector<EncoderBlockWeights> encoder_;
  std::vector<DecoderBlockWeights> decoder_;
  Tensor encoder_final_norm_, decoder_final_norm_;
  PositionBias encoder_bias_, decoder_bias_;
  LinearWeight cross_kv_;
  uint64_t mapped_bytes_ = 0;
  uint64_t converted_bytes_ = 0;
};

// T5's relative position bucket (HF T5Attention._relative_position_bucket), rel = key - query.
int relative_position_bucket(int64_t rel, bool bidirectional, int64_t num_buckets,
                             int64_t max_distance);

}  // namespace seqpipe::engine
