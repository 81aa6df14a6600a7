// seqpipe-mkmodel: writes a random-weight T5 checkpoint in the HuggingFace layout
// (config.json + model.safetensors, optionally spiece.model), initialised as transformers'
// T5PreTrainedModel._init_weights does, so the engine can be tested and benchmarked at any size
// without downloading weights.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "seqpipe/cli/cli.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/safetensors.h"
#include "seqpipe/engine/t5_config.h"

namespace {

namespace cli = seqpipe::cli;
namespace fs = std::filesystem;
using seqpipe::engine::EngineError;
using seqpipe::engine::FeedForward;
using seqpipe::engine::StorageType;
using seqpipe::engine::T5Config;

constexpr std::string_view kUsage = R"(usage: seqpipe-mkmodel --preset t5-small|tiny [options]

Writes a random-weight T5 checkpoint in the HuggingFace layout: DIR/config.json and
DIR/model.safetensors (and DIR/spiece.model with --spiece). Weights are normal with the standard
deviations of transformers' T5 _init_weights (layer norms 1.0), except the lm_head: std
d_model^-0.5 instead of 1.0. The random generator is seqpipe's own (mt19937_64), not torch's:
the same seed gives the same files. The lm_head is its own weight by default (untied): with
random weights a tied model only echoes its start token, so it would answer "".

presets (T5 v1.0: relu feed-forward):
  t5-small   d_model 512, d_kv 64, d_ff 2048, 8 heads, 6+6 layers, vocab 32128 (HF t5-small)
  tiny       d_model 64, d_kv 16, d_ff 128, 4 heads, 2+2 layers, vocab 512

options:
  --preset NAME           t5-small or tiny (required)
  --out DIR               output directory, created if missing (default: ./t5-PRESET-random)
  --seed N                random seed, an unsigned integer (default: 0)
  --dtype f32|f16|bf16    storage type of the weights (default: f32)
  --gated                 T5 v1.1 feed-forward: gated-gelu (wi_0, wi_1, wo) instead of relu
  --tied                  reuse shared.weight as the lm_head (T5 v1.0's layout; a random
                          tied model answers only its start token: "")
  --untied                a separate lm_head.weight (the default)
  --spiece                also train DIR/spiece.model (SentencePiece unigram, T5 ids: pad 0,
                          eos 1, unk 2, no bos) on the English corpus shipped with seqpipe:
                          min(vocab, 500) pieces, fewer if the corpus cannot support them;
                          ids past the pieces play T5's <extra_id_N> tokens
  --corpus FILE           corpus for --spiece, one sentence a line (default:
                          tools/mkmodel/corpus.txt of the source tree it was built from)
  --d-model N, --d-kv N, --d-ff N, --num-heads N, --num-layers N,
  --num-decoder-layers N, --vocab-size N
                          override the preset's dimension; --num-layers alone sets both
                          stacks, as in a HuggingFace config
  --help                  this text

exit status: 0 written, 1 failed while writing, 2 bad usage
)";

// The shipped corpus supports about 900 pieces; 500 keeps every piece frequent enough to be
// learned and leaves ids of the tiny model's 512 for extra tokens, as T5 does.
constexpr int kMaxSpiecePieces = 500;

using cli::UsageError;

struct Options {
  bool help = false;
  std::string preset;
  std::string out;
  uint64_t seed = 0;
  StorageType dtype = StorageType::kF32;
  std::string dtype_name = "f32";
  bool gated = false;
  bool tied = false;
  bool spiece = false;
  std::string corpus;
  // Explicit dimensions; unset ones come from the preset.
  std::optional<int64_t> d_model, d_kv, d_ff, num_heads, num_layers, num_decoder_layers, vocab_size;
};

int64_t parse_dimension(std::string_view flag, std::string_view text) {
  const uint64_t value = cli::parse_number<uint64_t>(flag, text);
  if (value == 0 || value > (1u << 24)) {
    throw UsageError(std::string(flag) + " must be in [1, 16777216], got " + std::string(text));
  }
  return static_cast<int64_t>(value);
}

StorageType parse_dtype(const std::string& name) {
  if (name == "f32") return StorageType::kF32;
  if (name == "f16") return StorageType::kF16;
  if (name == "bf16") return StorageType::kBF16;
  throw UsageError("--dtype must be f32, f16 or bf16, got '" + name + "'");
}

Options parse_args(int argc, char** argv) {
  Options o;
  CLI::App app;
  cli::set_up(app);
  app.add_flag("-h,--help", o.help);
  app.add_option("--preset", o.preset);
  app.add_option_function<std::string>("--out", [&](const std::string& dir) {
    if (dir.empty()) throw UsageError("--out needs a directory");
    o.out = dir;
  });
  cli::add_number(app, "--seed", o.seed);
  app.add_option_function<std::string>("--dtype", [&](const std::string& name) {
    o.dtype = parse_dtype(name);
    o.dtype_name = name;
  });
  app.add_flag("--gated", o.gated);
  app.add_flag("--tied", o.tied);
  bool untied = false;  // the default; scripts written before it became one still give it
  app.add_flag("--untied", untied);
  app.add_flag("--spiece", o.spiece);
  app.add_option("--corpus", o.corpus);
  for (auto [flag, dimension] : {std::pair{"--d-model", &o.d_model},
                                 {"--d-kv", &o.d_kv},
                                 {"--d-ff", &o.d_ff},
                                 {"--num-heads", &o.num_heads},
                                 {"--num-layers", &o.num_layers},
                                 {"--num-decoder-layers", &o.num_decoder_layers},
                                 {"--vocab-size", &o.vocab_size}}) {
    app.add_option_function<std::string>(flag, [flag, dimension](const std::string& text) {
      *dimension = parse_dimension(flag, text);
    });
  }
  const std::vector<std::string> unknown = cli::parse(app, argc, argv);
  if (o.help) return o;
  if (!unknown.empty()) throw UsageError("unknown argument '" + unknown.front() + "'");
  if (o.preset.empty()) throw UsageError("--preset is required (t5-small or tiny)");
  if (o.preset != "t5-small" && o.preset != "tiny") {
    throw UsageError("--preset must be t5-small or tiny, got '" + o.preset + "'");
  }
  if (!o.corpus.empty() && !o.spiece) throw UsageError("--corpus is only used with --spiece");
  if (o.tied && untied) throw UsageError("--tied and --untied do not go together");
  if (o.out.empty()) o.out = "t5-" + o.preset + "-random";
  return o;
}

T5Config make_config(const Options& o) {
  T5Config c;
  if (o.preset == "t5-small") {
    c.d_model = 512, c.d_kv = 64, c.d_ff = 2048, c.num_heads = 8;
    c.num_layers = 6, c.num_decoder_layers = 6, c.vocab_size = 32128;
  } else {
    c.d_model = 64, c.d_kv = 16, c.d_ff = 128, c.num_heads = 4;
    c.num_layers = 2, c.num_decoder_layers = 2, c.vocab_size = 512;
  }
  c.d_model = o.d_model.value_or(c.d_model);
  c.d_kv = o.d_kv.value_or(c.d_kv);
  c.d_ff = o.d_ff.value_or(c.d_ff);
  c.num_heads = o.num_heads.value_or(c.num_heads);
  if (o.num_layers) c.num_layers = c.num_decoder_layers = *o.num_layers;
  c.num_decoder_layers = o.num_decoder_layers.value_or(c.num_decoder_layers);
  c.vocab_size = o.vocab_size.value_or(c.vocab_size);
  c.feed_forward = o.gated ? FeedForward::kGatedGelu : FeedForward::kRelu;
  c.tie_word_embeddings = o.tied;
  // The engine's own parser is the judge of a valid config (e.g. eos id 1 needs vocab >= 2).
  try {
    return T5Config::from_json_text(c.to_json(), "the requested config");
  } catch (const EngineError& e) {
    throw UsageError(e.what());
  }
}

// Standard normal numbers from mt19937_64 by Box-Muller. std::normal_distribution is not
// specified exactly by the standard; this is, so a seed means the same weights everywhere.
class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) : rng_(seed) {}

  double next() {
    if (spare_) {
      const double z = *spare_;
      spare_.reset();
      return z;
    }
    const double u1 = static_cast<double>((rng_() >> 11) + 1) * 0x1p-53;  // (0, 1]
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1p-53;        // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * M_PI * u2;
    spare_ = r * std::sin(angle);
    return r * std::cos(angle);
  }

 private:
  std::mt19937_64 rng_;
  std::optional<double> spare_;
};

struct Weight {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Draws the checkpoint's tensors in a fixed order, each with HF's init for its kind.
class WeightMaker {
 public:
  WeightMaker(const T5Config& config, uint64_t seed) : c_(config), normal_(seed) {}

  std::vector<Weight> make() {
    const double d_model = static_cast<double>(c_.d_model);
    add_normal("shared.weight", {c_.vocab_size, c_.d_model}, 1.0);
    for (int64_t i = 0; i < c_.num_layers; ++i) {
      const std::string block = "encoder.block." + std::to_string(i) + ".";
      add_attention(block + "layer.0.SelfAttention.", i == 0);
      add_ones(block + "layer.0.layer_norm.weight");
      add_feed_forward(block + "layer.1.DenseReluDense.");
      add_ones(block + "layer.1.layer_norm.weight");
    }
    add_ones("encoder.final_layer_norm.weight");
    for (int64_t i = 0; i < c_.num_decoder_layers; ++i) {
      const std::string block = "decoder.block." + std::to_string(i) + ".";
      add_attention(block + "layer.0.SelfAttention.", i == 0);
      add_ones(block + "layer.0.layer_norm.weight");
      add_attention(block + "layer.1.EncDecAttention.", false);
      add_ones(block + "layer.1.layer_norm.weight");
      add_feed_forward(block + "layer.2.DenseReluDense.");
      add_ones(block + "layer.2.layer_norm.weight");
    }
    add_ones("decoder.final_layer_norm.weight");
    // HF draws an untied lm_head with std 1.0; d_model^-0.5 keeps the random model's logits
    // near unit scale, as the tied head's d_model^-0.5 rescaling of the decoder output does.
    if (!c_.tie_word_embeddings)
      add_normal("lm_head.weight", {c_.vocab_size, c_.d_model}, std::pow(d_model, -0.5));
    return std::move(weights_);
  }

 private:
  void add_normal(const std::string& name, std::vector<int64_t> shape, double std_dev) {
    Weight w{name, std::move(shape), {}};
    int64_t numel = 1;
    for (int64_t d : w.shape) numel *= d;
    w.values.resize(static_cast<size_t>(numel));
    for (float& v : w.values) v = static_cast<float>(std_dev * normal_.next());
    weights_.push_back(std::move(w));
  }

  void add_ones(const std::string& name) {
    weights_.push_back(
        {name, {c_.d_model}, std::vector<float>(static_cast<size_t>(c_.d_model), 1.0f)});
  }

  void add_attention(const std::string& prefix, bool has_position_bias) {
    const int64_t inner = c_.inner_dim();
    const double d_model = static_cast<double>(c_.d_model);
    add_normal(prefix + "q.weight", {inner, c_.d_model},
               std::pow(d_model * static_cast<double>(c_.d_kv), -0.5));
    add_normal(prefix + "k.weight", {inner, c_.d_model}, std::pow(d_model, -0.5));
    add_normal(prefix + "v.weight", {inner, c_.d_model}, std::pow(d_model, -0.5));
    add_normal(prefix + "o.weight", {c_.d_model, inner},
               std::pow(static_cast<double>(inner), -0.5));
    if (has_position_bias) {
      add_normal(prefix + "relative_attention_bias.weight",
                 {c_.relative_attention_num_buckets, c_.num_heads}, std::pow(d_model, -0.5));
    }
  }

  void add_feed_forward(const std::string& prefix) {
    const double wi_std = std::pow(static_cast<double>(c_.d_model), -0.5);
    if (c_.feed_forward == FeedForward::kGatedGelu) {
      add_normal(prefix + "wi_0.weight", {c_.d_ff, c_.d_model}, wi_std);
      add_normal(prefix + "wi_1.weight", {c_.d_ff, c_.d_model}, wi_std);
    } else {
      add_normal(prefix + "wi.weight", {c_.d_ff, c_.d_model}, wi_std);
    }
    add_normal(prefix + "wo.weight", {c_.d_model, c_.d_ff},
               std::pow(static_cast<double>(c_.d_ff), -0.5));
  }

  const T5Config& c_;
  NormalSampler normal_;
  std::vector<Weight> weights_;
};

// Feeds the corpus to the trainer from memory, so no temporary file is needed.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return next_ >= lines_.size(); }
  void Next() override { ++next_; }
  const std::string& value() const override { return lines_[next_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t next_ = 0;
};

std::string default_corpus_path() {
  // The source tree's copy (SEQPIPE_SOURCE_DIR, set by tools/CMakeLists.txt).
  return (fs::path(SEQPIPE_SOURCE_DIR) / "tools" / "mkmodel" / "corpus.txt").string();
}

struct TrainedSpiece {
  std::string model_proto;  // the bytes of spiece.model
  int pieces = 0;
};

// Trains the SentencePiece model meant for `out_path`; the caller writes it once everything
// else succeeded, so a failed training leaves no half-made model directory.
TrainedSpiece train_spiece(const std::string& corpus_path, const std::string& out_path,
                           int64_t model_vocab) {
  std::ifstream in(corpus_path);
  if (!in) {
    throw EngineError(corpus_path + ": cannot open the SentencePiece corpus (pass --corpus FILE)");
  }
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  if (lines.empty()) throw EngineError(corpus_path + ": the corpus is empty");

  const int64_t pieces = std::min<int64_t>(model_vocab, kMaxSpiecePieces);
  LineIterator sentences(lines);
  std::string model_proto;
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      {
          {"model_type", "unigram"},
          {"vocab_size", std::to_string(pieces)},
          {"hard_vocab_limit", "false"},  // fewer pieces if the corpus cannot support them
          {"pad_id", "0"},
          {"eos_id", "1"},
          {"unk_id", "2"},
          {"bos_id", "-1"},
          {"character_coverage", "1.0"},
          {"num_threads", "1"},  // deterministic and fast enough for a small corpus
          {"minloglevel", "2"},  // errors only: the trainer logs every EM step by default
      },
      &sentences, &model_proto);
  if (!status.ok()) {
    throw EngineError(out_path + ": SentencePiece training on " + corpus_path +
                      " failed (model vocab_size " + std::to_string(model_vocab) +
                      "): " + status.ToString());
  }
  sentencepiece::SentencePieceProcessor trained;
  if (const auto loaded = trained.LoadFromSerializedProto(model_proto); !loaded.ok()) {
    throw EngineError(out_path +
                      ": the trained SentencePiece model does not load: " + loaded.ToString());
  }
  if (trained.GetPieceSize() > model_vocab) {
    throw EngineError(out_path + ": SentencePiece produced " +
                      std::to_string(trained.GetPieceSize()) +
                      " pieces, more than the model's vocab_size " + std::to_string(model_vocab));
  }
  return {std::move(model_proto), trained.GetPieceSize()};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw EngineError(path + ": cannot write");
}

std::string describe(const T5Config& c) {
  return "d_model " + std::to_string(c.d_model) + ", d_kv " + std::to_string(c.d_kv) + ", d_ff " +
         std::to_string(c.d_ff) + ", " + std::to_string(c.num_heads) + " heads, " +
         std::to_string(c.num_layers) + "+" + std::to_string(c.num_decoder_layers) +
         " layers, vocab " + std::to_string(c.vocab_size) + ", " +
         (c.feed_forward == FeedForward::kGatedGelu ? "gated-gelu" : "relu") + ", " +
         (c.tie_word_embeddings ? "tied" : "untied");
}

void make_model(const Options& o) {
  const T5Config config = make_config(o);
  const fs::path dir(o.out);
  const std::string config_path = (dir / "config.json").string();
  const std::string weights_path = (dir / "model.safetensors").string();
  const std::string spiece_path = (dir / "spiece.model").string();
  const std::string corpus = o.corpus.empty() ? default_corpus_path() : o.corpus;
  const TrainedSpiece spiece =
      o.spiece ? train_spiece(corpus, spiece_path, config.vocab_size) : TrainedSpiece{};

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw EngineError(o.out + ": cannot create directory: " + ec.message());

  write_file(config_path, config.to_json());
  std::cout << "wrote " << config_path << ": " << describe(config) << "\n";

  const std::vector<Weight> weights = WeightMaker(config, o.seed).make();
  std::vector<seqpipe::engine::TensorToWrite> tensors;
  int64_t parameters = 0;
  for (const Weight& w : weights) {
    tensors.push_back({w.name, w.shape, w.values.data(), o.dtype});
    parameters += static_cast<int64_t>(w.values.size());
  }
  seqpipe::engine::write_safetensors(weights_path, tensors);
  std::cout << "wrote " << weights_path << ": " << tensors.size() << " tensors, " << parameters
            << " parameters, " << o.dtype_name << ", " << fs::file_size(weights_path)
            << " bytes, seed " << o.seed << "\n";

  if (o.spiece) {
    write_file(spiece_path, spiece.model_proto);
    std::cout << "wrote " << spiece_path << ": " << spiece.pieces
              << " pieces (pad 0, eos 1, unk 2), trained on " << corpus << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse_args(argc, argv);
    if (options.help) {
      std::cout << kUsage;
      return 0;
    }
    make_model(options);
    return 0;
  } catch (const UsageError& e) {
    std::cerr << "seqpipe-mkmodel: " << e.what() << " (see --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "seqpipe-mkmodel: " << e.what() << "\n";
    return 1;
  }
}
