#include "seqpipe/engine/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "ops.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/safetensors.h"

namespace seqpipe::engine {

int relative_position_bucket(int64_t rel, bool bidirectional, int64_t num_buckets,
                             int64_t max_distance) {
  // Mirrors HF T5Attention._relative_position_bucket, including its float32 log arithmetic.
  int64_t bucket = 0;
  int64_t n;
  if (bidirectional) {
    num_buckets /= 2;
    if (rel > 0) bucket += num_buckets;
    n = rel < 0 ? -rel : rel;
  } else {
    n = rel < 0 ? -rel : 0;
  }
  const int64_t max_exact = num_buckets / 2;
  if (n < max_exact) return static_cast<int>(bucket + n);
  const float scaled = std::log(static_cast<float>(n) / static_cast<float>(max_exact)) /
                       static_cast<float>(std::log(static_cast<double>(max_distance) /
                                                   static_cast<double>(max_exact))) *
                       static_cast<float>(num_buckets - max_exact);
  const int64_t large =
      std::min<int64_t>(max_exact + static_cast<int64_t>(scaled), num_buckets - 1);
  return static_cast<int>(bucket + large);
}

namespace {

// The host tensor `t` on `device`: itself on the CPU, else a copy.
Tensor on_device(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  Tensor out = Tensor::empty(t.shape(), device, t.dtype());
  ops::copy_to(out, t);
  return out;
}

// Loads tensors by their HF names with the shapes config.json implies, and counts what is used
// as the file stores it versus converted.
class WeightLoader {
 public:
  WeightLoader(const std::string& path, const ModelOptions& options)
      : file_(path), options_(options) {}

  // A tensor as fp32 on the host.
  Tensor get_host(const std::string& name, std::vector<int64_t> shape) {
    Tensor t = file_.load(name, shape);
    count(t, stored_as_f32(name));
    return t;
  }
  // The same on the model's device.
  Tensor get(const std::string& name, std::vector<int64_t> shape) {
    return on_device(get_host(name, std::move(shape)), options_.device);
  }
  // A linear layer's weight in the compute type (options.compute_type, resolved).
  LinearWeight linear(const std::string& name, std::vector<int64_t> shape) {
    return prepare_source(name, shape);
  }
  // The lm_head of tied embeddings: the table's bf16 tensor as stored (see prepare_source()), else
  // the fp32 table itself, counted already.
  LinearWeight tied(const std::string& name, const Tensor& table) {
    if (bf16_as_stored(name)) return prepare(file_.load_bf16(name, table.shape()), true, true);
    return prepare(table, false, false);
  }
  // The weights `names` ([rows, cols] each) as one linear layer, their rows one after another
  // (a copy on the host, in the type the compute type reads them in, then prepared).
  LinearWeight concatenated(const std::vector<std::string>& names, int64_t rows, int64_t cols) {
    std::vector<Tensor> parts;
    parts.reserve(names.size());
    for (const std::string& name : names) parts.push_back(source(name, {rows, cols}));
    Tensor all = Tensor::empty({rows * static_cast<int64_t>(names.size()), cols}, Device::kCpu,
                               parts.front().dtype());
    auto* out = static_cast<char*>(all.data_as<void>());
    for (const Tensor& part : parts) {
      const size_t bytes = static_cast<size_t>(part.bytes());
      if (part.dtype() != all.dtype())
        throw EngineError(path() + ": '" + names.front() + "' and '" + names.back() +
                          "' are stored in different types; they are concatenated at load");
      std::memcpy(out, part.data_as<void>(), bytes);
      out += bytes;
    }
    return prepare(all, true, false);  // a copy made here: converted
  }
  bool contains(const std::string& name) const { return file_.contains(name); }
  const std::string& path() const { return file_.path(); }
  uint64_t stored() const { return stored_; }
  uint64_t converted() const { return converted_; }

 private:
  // A linear layer's weight prepared from what it is made of: a bf16 checkpoint's tensor as
  // stored when the compute type is bfloat16, else fp32.
  LinearWeight prepare_source(const std::string& name, const std::vector<int64_t>& shape) {
    const Tensor t = source(name, shape);  // first: it names a missing tensor
    return prepare(t, true, bf16_as_stored(name) || stored_as_f32(name));
  }
  Tensor source(const std::string& name, const std::vector<int64_t>& shape) {
    return bf16_as_stored(name) ? file_.load_bf16(name, shape) : file_.load(name, shape);
  }
  bool stored_as_f32(const std::string& name) const {
    return file_.tensors().at(name).dtype == StorageType::kF32;
  }
  bool bf16_as_stored(const std::string& name) const {
    return options_.compute_type == ComputeType::kBFloat16 && file_.contains(name) &&
           file_.tensors().at(name).dtype == StorageType::kBF16;
  }
  // `count_in_place`: count `source` when the weight is it (not when it was counted already);
  // `as_stored`: `source` holds the file's bytes unchanged.
  LinearWeight prepare(const Tensor& source, bool count_in_place, bool as_stored) {
    LinearWeight w = ops::prepare_linear(source, options_);
    if (w.weight.data_as<void>() == source.data_as<void>()) {
      if (count_in_place) count(source, as_stored);
    } else {
      converted_ += static_cast<uint64_t>(w.bytes());
    }
    return w;
  }
  void count(const Tensor& t, bool as_stored) {
    (as_stored ? stored_ : converted_) += static_cast<uint64_t>(t.bytes());
  }

  SafeTensorsFile file_;
  const ModelOptions& options_;
  uint64_t stored_ = 0, converted_ = 0;
};

// A self-attention's weights: q, k and v as one [3 inner, d_model] matrix (one GEMM), and o.
AttentionWeights load_self_attention(WeightLoader& w, const std::string& scope, const T5Config& c) {
  AttentionWeights a;
  a.qkv = w.concatenated({scope + ".q.weight", scope + ".k.weight", scope + ".v.weight"},
                         c.inner_dim(), c.d_model);
  a.o = w.linear(scope + ".o.weight", {c.d_model, c.inner_dim()});
  return a;
}

FeedForwardWeights load_ffn(WeightLoader& w, const std::string& scope, const T5Config& c) {
  FeedForwardWeights f;
  if (c.feed_forward == FeedForward::kGatedGelu) {
    f.wi = w.linear(scope + ".wi_0.weight", {c.d_ff, c.d_model});
    f.wi_1 = w.linear(scope + ".wi_1.weight", {c.d_ff, c.d_model});
  } else {
    f.wi = w.linear(scope + ".wi.weight", {c.d_ff, c.d_model});
  }
  f.wo = w.linear(scope + ".wo.weight", {c.d_model, c.d_ff});
  return f;
}

// From the host copy of the bucket table.
PositionBias expand_bias(const Tensor& buckets, const T5Config& c, bool bidirectional,
                         Device device) {
  PositionBias bias;
  bias.max_distance = c.relative_attention_max_distance;
  const int64_t width = 2 * bias.max_distance + 1;
  Tensor table = Tensor::empty({c.num_heads, width});
  for (int64_t r = -bias.max_distance; r <= bias.max_distance; ++r) {
    const int b = relative_position_bucket(r, bidirectional, c.relative_attention_num_buckets,
                                           c.relative_attention_max_distance);
    for (int64_t h = 0; h < c.num_heads; ++h) {
      table.row(h)[r + bias.max_distance] = buckets.row(b)[h];
    }
  }
  bias.table = on_device(table, device);
  return bias;
}

ComputeType resolve_compute_type(ComputeType requested, const T5Config& c, Device device) {
  if (requested == ComputeType::kFloat16) {
    // fp16's range ends at 65504: T5 v1.1 / flan-T5's FFN outputs exceed it (HF keeps wo in
    // fp32 for this reason; CTranslate2 reports the same overflow).
    if (c.feed_forward == FeedForward::kGatedGelu) {
      throw EngineError(
          "compute type float16 is refused for T5 v1.1 (gated-gelu) models: their feed-forward "
          "activations overflow fp16; use bfloat16");
    }
    if (device == Device::kCpu)
      throw EngineError("compute type float16 has no CPU kernels in this engine; use bfloat16");
  }
  return requested == ComputeType::kAuto ? ops::best_compute_type(device) : requested;
}

}  // namespace

int64_t LinearWeight::bytes() const {
  return weight.bytes() + scales.bytes() + (packed ? packed->bytes() : 0);
}

std::shared_ptr<const T5Model> T5Model::load(const std::string& dir, const ModelOptions& options) {
  if (!std::filesystem::is_directory(dir))
    throw EngineError(dir + ": model directory does not exist");
  // EngineError now, naming the device, where this build or machine cannot run it.
  open_device(options.device_spec());
  if (options.threads < 0) throw EngineError("ModelOptions.threads must be >= 0");
  if (options.threads > 0) ops::set_num_threads(options.device, options.threads);

  std::shared_ptr<T5Model> m(new T5Model());
  m->dir_ = dir;
  m->options_ = options;
  m->config_ = T5Config::from_json_file(dir + "/config.json");
  const T5Config& c = m->config_;
  m->options_.compute_type = resolve_compute_type(options.compute_type, c, options.device);
  WeightLoader w(dir + "/model.safetensors", m->options_);

  const Tensor shared = w.get_host("shared.weight", {c.vocab_size, c.d_model});
  m->shared_ = on_device(shared, options.device);
  if (c.tie_word_embeddings) {
    m->lm_head_ = w.tied("shared.weight", shared);
  } else {
    if (!w.contains("lm_head.weight")) {
      throw EngineError(
          w.path() +
          ": missing tensor 'lm_head.weight' (config.json has tie_word_embeddings: false)");
    }
    m->lm_head_ = w.linear("lm_head.weight", {c.vocab_size, c.d_model});
  }

  const std::vector<int64_t> bias_shape = {c.relative_attention_num_buckets, c.num_heads};
  std::vector<std::string> cross_kv_names;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string b = "encoder.block." + std::to_string(i);
    EncoderBlockWeights blk;
    blk.attention_norm = w.get(b + ".layer.0.layer_norm.weight", {c.d_model});
    blk.attention = load_self_attention(w, b + ".layer.0.SelfAttention", c);
    blk.ffn_norm = w.get(b + ".layer.1.layer_norm.weight", {c.d_model});
    blk.ffn = load_ffn(w, b + ".layer.1.DenseReluDense", c);
    m->encoder_.push_back(std::move(blk));
  }
  m->encoder_final_norm_ = w.get("encoder.final_layer_norm.weight", {c.d_model});
  m->encoder_bias_ =
      expand_bias(w.get_host("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                             bias_shape),
                  c, true, options.device);

  for (int64_t i = 0; i < c.num_decoder_layers; ++i) {
    const std::string b = "decoder.block." + std::to_string(i);
    DecoderBlockWeights blk;
    blk.self_attention_norm = w.get(b + ".layer.0.layer_norm.weight", {c.d_model});
    const std::string self = b + ".layer.0.SelfAttention", cross = b + ".layer.1.EncDecAttention";
    blk.self_attention = load_self_attention(w, self, c);
    blk.cross_attention_norm = w.get(b + ".layer.1.layer_norm.weight", {c.d_model});
    blk.cross_attention.q = w.linear(cross + ".q.weight", {c.inner_dim(), c.d_model});
    blk.cross_attention.o = w.linear(cross + ".o.weight", {c.d_model, c.inner_dim()});
    cross_kv_names.push_back(cross + ".k.weight");
    cross_kv_names.push_back(cross + ".v.weight");
    blk.ffn_norm = w.get(b + ".layer.2.layer_norm.weight", {c.d_model});
    blk.ffn = load_ffn(w, b + ".layer.2.DenseReluDense", c);
    m->decoder_.push_back(std::move(blk));
  }
  m->cross_kv_ = w.concatenated(cross_kv_names, c.inner_dim(), c.d_model);
  m->decoder_final_norm_ = w.get("decoder.final_layer_norm.weight", {c.d_model});
  m->decoder_bias_ =
      expand_bias(w.get_host("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                             bias_shape),
                  c, false, options.device);

  m->mapped_bytes_ = w.stored();
  m->converted_bytes_ = w.converted();
  return m;
}

}  // namespace seqpipe::engine
