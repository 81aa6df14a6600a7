#include "seqpipe/engine/t5_config.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "seqpipe/engine/error.h"
#include "seqpipe/generation/model_files.h"

namespace seqpipe::engine {

namespace {

using nlohmann::json;

class Reader {
 public:
  Reader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw EngineError(source_ + ": key '" + key + "' " + why);
  }

  // A positive integer; `fallback` < 0 means the key is required.
  int64_t positive(const std::string& key, int64_t fallback = -1) const {
    if (!j_.contains(key) || j_[key].is_null()) {
      if (fallback < 0) fail(key, "is missing");
      return fallback;
    }
    const json& v = j_[key];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      fail(key, "must be a positive integer, got " + v.dump());
    return v.get<int64_t>();
  }

  int token_id(const std::string& key, int fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    const json& v = j_[key];
    if (v.is_array() && v.size() == 1) return token_from(key, v[0]);  // newer configs allow lists
    return token_from(key, v);
  }

  bool boolean(const std::string& key, bool fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    if (!j_[key].is_boolean()) fail(key, "must be true or false, got " + j_[key].dump());
    return j_[key].get<bool>();
  }

  std::string string(const std::string& key, const std::string& fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    if (!j_[key].is_string()) fail(key, "must be a string, got " + j_[key].dump());
    return j_[key].get<std::string>();
  }

  double number(const std::string& key, double fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    if (!j_[key].is_number()) fail(key, "must be a number, got " + j_[key].dump());
    return j_[key].get<double>();
  }

 private:
  int token_from(const std::string& key, const json& v) const {
    // Range-checked before narrowing: 4294967295 must not become -1.
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t{1} << 30)) {
      fail(key, "must be a token id (integer >= 0), got " + v.dump());
    }
    return static_cast<int>(v.get<int64_t>());
  }

  const json& j_;
  std::string source_;
};

std::string shortest(float v) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace

T5Config T5Config::from_json_text(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw EngineError(source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw EngineError(source + ": not a JSON object");
  Reader r(j, source);

  const std::string model_type = r.string("model_type", "t5");
  if (model_type != "t5") r.fail("model_type", "is '" + model_type + "'; only 't5' is supported");

  T5Config c;
  c.d_model = r.positive("d_model");
  c.d_kv = r.positive("d_kv");
  c.d_ff = r.positive("d_ff");
  c.num_heads = r.positive("num_heads");
  c.num_layers = r.positive("num_layers");
  c.num_decoder_layers = r.positive("num_decoder_layers", c.num_layers);
  c.vocab_size = r.positive("vocab_size");
  c.relative_attention_num_buckets = r.positive("relative_attention_num_buckets", 32);
  c.relative_attention_max_distance = r.positive("relative_attention_max_distance", 128);
  if (c.relative_attention_num_buckets < 4 || c.relative_attention_num_buckets % 2 != 0) {
    r.fail("relative_attention_num_buckets", "must be an even number >= 4");
  }
  // The log-spaced buckets start at num_buckets/2 (causal) or /4 (bidirectional); a max_distance
  // at or below that makes HF's formula divide by log(<= 1).
  if (c.relative_attention_max_distance <= c.relative_attention_num_buckets / 2) {
    r.fail("relative_attention_max_distance",
           "must be greater than relative_attention_num_buckets / 2 (" +
               std::to_string(c.relative_attention_num_buckets / 2) + ")");
  }
  const double eps = r.number("layer_norm_epsilon", 1e-6);
  if (!(eps > 0 && eps < 1)) r.fail("layer_norm_epsilon", "must be in (0, 1)");
  c.layer_norm_epsilon = static_cast<float>(eps);

  const std::string ff = r.string("feed_forward_proj", "relu");
  if (ff == "relu") {
    c.feed_forward = FeedForward::kRelu;
  } else if (ff == "gated-gelu") {
    c.feed_forward = FeedForward::kGatedGelu;
  } else {
    r.fail("feed_forward_proj",
           "is '" + ff + "'; supported: 'relu' (T5 v1.0), 'gated-gelu' (T5 v1.1)");
  }
  const std::string act = r.string("dense_act_fn", ff == "relu" ? "relu" : "gelu_new");
  if ((ff == "relu" && act != "relu") || (ff == "gated-gelu" && act != "gelu_new")) {
    r.fail("dense_act_fn", "is '" + act + "'; with feed_forward_proj '" + ff + "' only '" +
                               (ff == "relu" ? "relu" : "gelu_new") + "' is supported");
  }
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
  if (r.boolean("is_decoder", false))
    r.fail("is_decoder", "is true; only encoder-decoder T5 is supported");
  c.decoder_start_token_id = r.token_id("decoder_start_token_id", 0);
  c.eos_token_id = r.token_id("eos_token_id", 1);
  c.pad_token_id = r.token_id("pad_token_id", 0);
  for (auto [key, id] :
       {std::pair{"decoder_start_token_id", c.decoder_start_token_id},
        std::pair{"eos_token_id", c.eos_token_id}, std::pair{"pad_token_id", c.pad_token_id}}) {
    if (id >= c.vocab_size)
      r.fail(key,
             "is " + std::to_string(id) + ", outside vocab_size " + std::to_string(c.vocab_size));
  }
  return c;
}

T5Config T5Config::from_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw EngineError(path + ": cannot open (a model directory needs config.json)");
  // At most one byte over the cap is read, whatever the file's size (it may grow meanwhile).
  std::string text(generation::kMaxModelConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw EngineError(path + ": cannot read");
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > generation::kMaxModelConfigBytes) {
    throw EngineError(path + ": larger than " + std::to_string(generation::kMaxModelConfigBytes) +
                      " bytes; not a model config (refused unparsed)");
  }
  return from_json_text(text, path);
}

std::string T5Config::to_json() const {
  const bool gated = feed_forward == FeedForward::kGatedGelu;
  nlohmann::ordered_json j = {
      {"architectures", {"T5ForConditionalGeneration"}},
      {"model_type", "t5"},
      {"d_model", d_model},
      {"d_kv", d_kv},
      {"d_ff", d_ff},
      {"num_heads", num_heads},
      {"num_layers", num_layers},
      {"num_decoder_layers", num_decoder_layers},
      {"vocab_size", vocab_size},
      {"relative_attention_num_buckets", relative_attention_num_buckets},
      {"relative_attention_max_distance", relative_attention_max_distance},
      // The float's shortest decimal form, not its widened double (1e-06, not 9.99999997e-07).
      {"layer_norm_epsilon", std::stod(shortest(layer_norm_epsilon))},
      {"feed_forward_proj", gated ? "gated-gelu" : "relu"},
      {"dense_act_fn", gated ? "gelu_new" : "relu"},
      {"is_gated_act", gated},
      {"tie_word_embeddings", tie_word_embeddings},
      {"decoder_start_token_id", decoder_start_token_id},
      {"eos_token_id", eos_token_id},
      {"pad_token_id", pad_token_id},
      {"dropout_rate", 0.1},
      {"initializer_factor", 1.0},
      {"is_encoder_decoder", true},
      {"use_cache", true},
  };
  return j.dump(2) + "\n";
}

}  // namespace seqpipe::engine
