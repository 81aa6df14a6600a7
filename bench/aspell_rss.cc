// aspell_rss: the postprocessor's SpellSuggester asked for suggestions over and over, as the
// bundled speller asks per unknown word, printing the process's RSS as it goes: Aspell 0.60.8's
// speller keeps memory per suggestion until it is deleted, which the suggester's recycling bounds.
//   aspell_rss [--calls N] [--recycle-calls N] [--dictionary PATH]
// --recycle-calls 0 never remakes the speller (the growth as it was); the default is the
// suggester's SpellSuggester::kRecycleCalls. docs/PERFORMANCE.md, "Memory over time (soak)".
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "postprocessor/spell_suggester.h"
#include "seqpipe/cli/cli.h"

namespace {

// This process's resident memory, in KiB (/proc/self/status, VmRSS).
long rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// Misspellings as the speller's clients type them: each asks Aspell for suggestions.
const std::vector<std::string> kWords = {
    "beleive",   "teh",        "wether", "recieve",  "occured",  "seperate",   "definately",
    "untill",    "wierd",      "freind", "becuase",  "tommorow", "acommodate", "neccessary",
    "goverment", "enviroment", "realy",  "calender", "prefered", "begining",   "finaly"};

}  // namespace

int main(int argc, char** argv) {
  using seqpipe::postprocessor::SpellSuggester;
  size_t calls = 40000, recycle_calls = SpellSuggester::kRecycleCalls;
  std::string dictionary = "/usr/lib/aspell/en_US.multi";
  try {
    CLI::App app;
    seqpipe::cli::set_up(app);
    seqpipe::cli::add_number(app, "--calls", calls);
    seqpipe::cli::add_number(app, "--recycle-calls", recycle_calls);
    app.add_option("--dictionary", dictionary);
    const std::vector<std::string> unknown = seqpipe::cli::parse(app, argc, argv);
    if (!unknown.empty())
      throw seqpipe::cli::UsageError("unknown argument '" + unknown.front() + "'");
    if (calls < 8) throw seqpipe::cli::UsageError("--calls must be at least 8");
  } catch (const seqpipe::cli::UsageError& e) {
    std::fprintf(stderr, "aspell_rss: %s\n", e.what());
    return 2;
  }
  const SpellSuggester suggester(dictionary, false, recycle_calls);
  std::printf("recycle every %zu calls (0: never); RSS %ld KiB at the start\n", recycle_calls,
              rss_kib());
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 1; i <= calls; ++i) {
    suggester.suggest(kWords[i % kWords.size()], SpellSuggester::kCandidates);
    if (i % (calls / 8) == 0) std::printf("%8zu calls: RSS %ld KiB\n", i, rss_kib());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu calls in %.1f s (%.0f us a call), %zu spellers made\n", calls, seconds,
              seconds * 1e6 / static_cast<double>(calls), suggester.spellers_made());
  return 0;
}
