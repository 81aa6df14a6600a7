// seqpipe-generate: runs one input through a T5 checkpoint with the engine's greedy or beam
// search and prints the output ids (and text, when the model directory has spiece.model).
#include <charconv>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "seqpipe/cli/cli.h"
#include "seqpipe/cli/generate_flags.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/model.h"
#include "seqpipe/engine/tokenizer.h"

namespace {

namespace engine = seqpipe::engine;
namespace cli = seqpipe::cli;
namespace fs = std::filesystem;

constexpr std::string_view kUsage =
    R"(usage: seqpipe-generate --model DIR (--text "..." | --ids 1,2,3) [options]

Encodes one input with a T5 checkpoint (a HuggingFace directory: config.json, model.safetensors
and, for --text, spiece.model) and decodes it with greedy or beam search, as transformers'
generate() does.

input (exactly one):
  --text "..."            text, tokenized with DIR/spiece.model (eos appended)
  --ids 1,2,3             token ids, comma-separated non-negative integers, used as given
                          (T5 inputs normally end with eos, id 1)

options:
  --model DIR             the model directory (required)
  --early-stopping        beam search stops once num_beams hypotheses finished
  --threads N             threads for the BLAS and the kernels; 0: all cores (default: 0)
  --compute-type T        the linear layers' number type: float32, bfloat16, int8,
                          int8_bfloat16 or auto (the best this CPU runs) (default: float32);
                          on a GPU: float32, bfloat16, float16 (auto: bfloat16)
  --device D              cpu, cuda (the first GPU) or cuda:N (default: cpu)
  --scores                also print the log-probability of every generated token
  --json                  print one JSON object: input_ids, ids, text (null without
                          spiece.model), score, timings_ms
                          (and token_logprobs with --scores)
  --help                  this text

The output ids start with the decoder start token (0), as HuggingFace returns them. The score
is HuggingFace's beam sequences_score (sum of log-probs / length^length_penalty), and the same
formula over the greedy tokens. Timings: load = model (+ tokenizer) load; generate = encoder
pass + decoding, wall clock.
exit status: 0 done, 1 the model or the run failed, 2 bad usage
)";

// The generation options the engine takes alone, as the server's (docs/PROTOCOL.md): not
// return_scores (--scores prints what it collects, always on) nor num_return_sequences (one
// output is printed).
bool engine_option(const seqpipe::protocol::GenerateOption& option) {
  return seqpipe::protocol::is_search_option(option) && option.name != "return_scores" &&
         option.name != "num_return_sequences";
}

std::string usage() {
  return std::string(kUsage) + "\ngeneration options (the server's, checked by the engine):\n" +
         cli::generate_options_usage(engine_option);
}

using cli::UsageError;

struct Options {
  bool help = false;
  std::string model_dir;
  std::optional<std::string> text;
  std::optional<std::vector<int>> ids;
  engine::DecodingOptions decoding;
  int threads = 0;
  engine::ComputeType compute_type = engine::ComputeType::kFloat32;
  engine::DeviceSpec device;
  bool scores = false;  // print the per-token log-probs
  bool json = false;
};

// "1,2,3" -> {1, 2, 3}; every element a non-negative integer that fits an int.
std::vector<int> parse_ids(std::string_view text) {
  std::vector<int> ids;
  size_t start = 0;
  while (true) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    int id = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || id < 0) {
      throw UsageError("--ids needs comma-separated non-negative integers, got '" +
                       std::string(item) + "' in '" + std::string(text) + "'");
    }
    ids.push_back(id);
    if (comma == text.size()) break;
    start = comma + 1;
  }
  return ids;
}

Options parse_args(int argc, char** argv) {
  Options o;
  CLI::App app;
  cli::set_up(app);
  app.add_flag("-h,--help", o.help);
  app.add_option("--model", o.model_dir);
  app.add_option_function<std::string>("--text", [&](const std::string& v) { o.text = v; });
  app.add_option_function<std::string>("--ids",
                                       [&](const std::string& v) { o.ids = parse_ids(v); });
  seqpipe::protocol::GenerateParams params;
  cli::add_generate_options(app, params, engine_option);
  bool early_stopping = false;
  app.add_flag("--early-stopping", early_stopping);
  cli::add_number(app, "--threads", o.threads);
  app.add_option_function<std::string>("--compute-type", [&](const std::string& v) {
    try {
      o.compute_type = engine::parse_compute_type(v);
    } catch (const engine::EngineError& e) {
      throw UsageError(std::string("--compute-type: ") + e.what());
    }
  });
  app.add_option_function<std::string>("--device", [&](const std::string& v) {
    try {
      o.device = engine::parse_device(v);
    } catch (const engine::EngineError& e) {
      throw UsageError(std::string("--device: ") + e.what());
    }
  });
  app.add_flag("--scores", o.scores);
  app.add_flag("--json", o.json);
  const std::vector<std::string> unknown = cli::parse(app, argc, argv);
  if (o.help) return o;
  o.decoding = seqpipe::engine::decoding_options(params);
  o.decoding.early_stopping = early_stopping;
  if (!unknown.empty()) throw UsageError("unknown argument '" + unknown.front() + "'");
  if (o.threads < 0) throw UsageError("--threads must be >= 0");
  if (o.model_dir.empty()) throw UsageError("--model DIR is required");
  if (o.text.has_value() == o.ids.has_value()) {
    throw UsageError("give exactly one of --text and --ids");
  }
  // The engine's own check, done before the model loads so that bad options are a usage error.
  try {
    o.decoding.validate(std::numeric_limits<int>::max());
  } catch (const engine::EngineError& e) {
    throw UsageError(e.what());
  }
  return o;
}

struct Generation {
  std::vector<int> input_ids;
  engine::GenerationResult result;
  std::optional<std::string> text;  // the output's text, when the model has a tokenizer
  double load_ms = 0;
  double generate_ms = 0;  // encoder pass + decoding, wall clock
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

Generation generate(const Options& o) {
  // Before anything in the directory is looked for, so a wrong path is named as that.
  std::error_code ec;
  if (!fs::is_directory(o.model_dir, ec))
    throw std::runtime_error("--model " + o.model_dir + ": the model directory does not exist");
  if (!fs::is_regular_file(fs::path(o.model_dir) / "config.json", ec)) {
    throw std::runtime_error("--model " + o.model_dir +
                             ": no config.json, so not a HuggingFace T5 model directory "
                             "(config.json, model.safetensors, spiece.model)");
  }
  const std::string spiece_path = (fs::path(o.model_dir) / "spiece.model").string();
  const bool has_tokenizer = fs::exists(spiece_path);
  if (o.text && !has_tokenizer) {
    throw UsageError("--text needs " + spiece_path + " to tokenize; pass token ids with --ids");
  }

  Generation g;
  const auto load_start = std::chrono::steady_clock::now();
  auto model =
      engine::T5Model::load(o.model_dir, engine::ModelOptions{.threads = o.threads,
                                                              .device = o.device.device,
                                                              .device_index = o.device.index,
                                                              .compute_type = o.compute_type});
  std::unique_ptr<engine::Tokenizer> tokenizer;
  if (has_tokenizer) tokenizer = std::make_unique<engine::Tokenizer>(spiece_path);
  g.load_ms = ms_since(load_start);

  g.input_ids = o.text ? tokenizer->encode(*o.text) : *o.ids;
  // Greedy search scores a sequence from the per-token log-probs, so always collect them.
  engine::DecodingOptions decoding = o.decoding;
  decoding.return_scores = true;
  const auto generate_start = std::chrono::steady_clock::now();
  g.result = std::move(engine::generate(model, {g.input_ids}, decoding).front());
  g.generate_ms = ms_since(generate_start);
  if (tokenizer) g.text = tokenizer->decode(g.result.ids);
  return g;
}

void print_json(const Generation& g, bool scores) {
  nlohmann::ordered_json out = {
      {"input_ids", g.input_ids},
      {"ids", g.result.ids},
      {"text", g.text ? nlohmann::ordered_json(*g.text) : nlohmann::ordered_json(nullptr)},
      {"score", g.result.score},
      {"timings_ms", {{"load", g.load_ms}, {"generate", g.generate_ms}}},
  };
  if (scores) out["token_logprobs"] = g.result.token_logprobs;
  // Replace rather than throw on bytes that are not UTF-8: the output is for reading.
  std::cout << out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
}

void print_plain(const Generation& g, bool scores) {
  auto print_ids = [](const char* label, const std::vector<int>& ids) {
    std::cout << label;
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
    std::cout << "\n";
  };
  print_ids("input ids:  ", g.input_ids);
  print_ids("output ids: ", g.result.ids);
  if (g.text) std::cout << "text:       " << *g.text << "\n";
  std::cout << "score:      " << g.result.score << "\n";
  if (scores) {
    std::cout << "logprobs:  ";
    for (float p : g.result.token_logprobs) std::cout << " " << p;
    std::cout << "\n";
  }
  std::cout << "timings:    load " << g.load_ms << " ms, generate (encode + decode) "
            << g.generate_ms << " ms\n";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse_args(argc, argv);
    if (options.help) {
      std::cout << usage();
      return 0;
    }
    const Generation g = generate(options);
    if (options.json) {
      print_json(g, options.scores);
    } else {
      print_plain(g, options.scores);
    }
    return 0;
  } catch (const UsageError& e) {
    std::cerr << "seqpipe-generate: " << e.what() << " (see --help)\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "seqpipe-generate: out of memory (the KV cache is allocated up front for "
                 "--max-new-tokens positions per beam)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "seqpipe-generate: " << e.what() << "\n";
    return 1;
  }
}
