// stream_rewrite_bench: the postprocessor's cost per streamed partial with the bundled speller
// (models/speller-t5: the text frame, the word lists, Aspell with the noisy channel, the
// confusion sets), side by side in one run: each partial rewritten whole (every partial its own
// sequence, so nothing of an earlier one is reused: the cost before the postprocessor kept a
// stream's final words) and each sequence's partials in order (the final words' rewrites kept,
// only the rest rewritten). The inputs are PyTorch's greedy ids for the 200 held-out noisy texts
// of tests/data/speller-t5-greedy.json, as typed and capitalised with punctuation; a partial is
// sent after each decoder step that completes a word. Both ways must send the same texts.
//   stream_rewrite_bench [--rounds N] [--source-dir DIR]
#include <time.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "postprocessor/postprocessor_stage.h"
#include "seqpipe/cli/cli.h"
#include "seqpipe/config/config.h"
#include "text/word_alignment.h"

namespace {

using namespace seqpipe;

// This thread's CPU time in seconds: the machine may be shared, its wall clock is not the cost.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

struct Stream {
  std::string input;
  std::vector<std::vector<int32_t>> partials;  // the ids after each step that completes a word
  std::vector<int32_t> ids;                    // all of them: the final item
};

std::vector<Stream> streams_of(const std::string& source_dir, const engine::Tokenizer& tokenizer) {
  std::ifstream in(source_dir + "/tests/data/speller-t5-greedy.json");
  if (!in) throw std::runtime_error("cannot read " + source_dir + "/tests/data/");
  const auto data = nlohmann::json::parse(in);
  std::vector<Stream> streams;
  for (const auto& c : data.at("cases")) {
    const std::string text = c.at("text");
    std::string typed = text;
    typed[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(typed[0])));
    for (const std::string& input : {text, "\"" + typed + ", ok?\" (" + text + ")"}) {
      Stream s{.input = input, .partials = {}, .ids = c.at("ids")};
      size_t words = 0;
      for (size_t n = 2; n < s.ids.size(); ++n) {
        std::vector<int32_t> ids(s.ids.begin(), s.ids.begin() + static_cast<std::ptrdiff_t>(n));
        const std::string decoded = tokenizer.decode(std::vector<int>(ids.begin(), ids.end()));
        const size_t now = text::split_words(postprocessor::stable_prefix(decoded, {})).size();
        if (now == words) continue;
        words = now;
        s.partials.push_back(std::move(ids));
      }
      streams.push_back(std::move(s));
    }
  }
  return streams;
}

stage::Postprocess one_item(uint64_t request, const std::string& input,
                            const std::vector<int32_t>& ids, bool partial) {
  stage::DecodedItem item;
  item.request = request;
  item.gateway = "gw";
  item.deadline = Deadline::after(Now::read(), std::chrono::minutes(10));
  item.text = input;
  item.ids = ids;
  item.partial = partial;
  item.stream = true;
  stage::Postprocess work;
  work.items.push_back(std::move(item));
  return work;
}

// Every partial's text, in order; `seconds` gets the CPU time the partials took (not the finals).
// `whole`: each partial its own sequence (ended at once by its final item, not timed).
std::vector<std::string> run(postprocessor::PostprocessorStage& post,
                             const std::vector<Stream>& streams, bool whole, uint64_t& request,
                             double& seconds) {
  std::vector<std::string> texts;
  for (const auto& s : streams) {
    ++request;
    for (const auto& ids : s.partials) {
      worker::WorkerOutbox out;
      const double start = cpu_seconds();
      post.handle(one_item(request, s.input, ids, true), out);
      seconds += cpu_seconds() - start;
      texts.push_back(std::get<stage::Result>(out.pushes.at(0).second).items.at(0).text);
      if (whole) {
        worker::WorkerOutbox end;
        post.handle(one_item(request++, s.input, s.ids, false), end);
      }
    }
    worker::WorkerOutbox end;
    post.handle(one_item(request, s.input, s.ids, false), end);
  }
  return texts;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  std::string source_dir = SEQPIPE_SOURCE_DIR;
  try {
    CLI::App app;
    cli::set_up(app);
    cli::add_number(app, "--rounds", rounds);
    app.add_option("--source-dir", source_dir);
    const std::vector<std::string> unknown = cli::parse(app, argc, argv);
    if (!unknown.empty()) throw cli::UsageError("unknown argument '" + unknown.front() + "'");
    if (rounds < 1) throw cli::UsageError("--rounds must be at least 1");
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "stream_rewrite_bench: %s\n", e.what());
    return 2;
  }
  const std::string model = source_dir + "/models/speller-t5";
  const config::PipelineConfig config =
      config::load_config(source_dir + "/config/pipeline.yaml", config::model_overrides(model));
  auto registry = metrics::make_registry();
  metrics::StageMetrics metrics(*registry, "bench");
  const auto tokenizer = std::make_shared<engine::Tokenizer>(model + "/spiece.model");
  postprocessor::PostprocessorStage post(tokenizer, postprocessor::postprocessor_options(config),
                                         metrics);
  const auto streams = streams_of(source_dir, *tokenizer);
  uint64_t request = 0;
  std::printf(
      "%zu streams; CPU time per partial, best of %d rounds (each round: whole, then kept)\n",
      streams.size(), rounds);
  double best_whole = 1e30, best_kept = 1e30;
  size_t partials = 0;
  for (int r = 0; r < rounds; ++r) {
    double whole = 0, kept = 0;
    const auto whole_texts = run(post, streams, true, request, whole);
    const auto kept_texts = run(post, streams, false, request, kept);
    if (whole_texts != kept_texts) {
      std::fprintf(stderr, "stream_rewrite_bench: the partials differ between the two ways\n");
      return 1;
    }
    partials = whole_texts.size();
    best_whole = std::min(best_whole, whole / static_cast<double>(partials));
    best_kept = std::min(best_kept, kept / static_cast<double>(partials));
    std::printf("round %d: rewritten whole %.1f us, final words kept %.1f us per partial\n", r + 1,
                whole / static_cast<double>(partials) * 1e6,
                kept / static_cast<double>(partials) * 1e6);
  }
  std::printf("%zu partials: rewritten whole %.1f us, final words kept %.1f us: %.2fx\n", partials,
              best_whole * 1e6, best_kept * 1e6, best_whole / best_kept);
  return 0;
}
