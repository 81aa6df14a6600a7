#pragma once
// The model hyper-parameters, read from a HuggingFace config.json. Every shape the engine
// allocates comes from here.
#include <cstdint>
#include <string>

namespace seqpipe::engine {

enum class FeedForward {
  kRelu,       // T5 v1.0: wo(relu(wi(x)))
  kGatedGelu,  // T5 v1.1 / flan-t5: wo(gelu_tanh(wi_0(x)) * wi_1(x))
};

struct T5Config {
  int64_t d_model = 0;
  int64_t d_kv = 0;
  int64_t d_ff = 0;
  int64_t num_heads = 0;
  int64_t num_layers = 0;          // encoder blocks
  int64_t num_decoder_layers = 0;  // decoder blocks (config default: num_layers)
  int64_t vocab_size = 0;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  float layer_norm_epsilon = 1e-6f;
  FeedForward feed_forward = FeedForward::kRelu;
  bool tie_word_embeddings = true;  // tied: lm_head = shared, decoder output scaled by d_model^-0.5
  int decoder_start_token_id = 0;
  int eos_token_id = 1;
  int pad_token_id = 0;

  int64_t inner_dim() const { return num_heads * d_kv; }

  // Parses and validates; throws EngineError naming the file and key at fault.
  static T5Config from_json_file(const std::string& path);
  static T5Config from_json_text(const std::string& text, const std::string& source_name);
  std::string to_json() const;  // a valid HuggingFace T5Config
};

}  // namespace seqpipe::engine
