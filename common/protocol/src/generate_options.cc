#include "seqpipe/protocol/generate_options.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <limits>

namespace seqpipe::protocol {

namespace {

using P = GenerateParams;
namespace range = generation::range;
constexpr FrontName kNo = FrontName::unsupported();

// The rows, in the order encoders write them and the docs list them. The five options of the
// protocol's first release come first (always written).
constexpr GenerateOption kOptions[] = {
    {.name = "max_new_tokens",
     .member = &P::max_new_tokens,
     .range = range::kMaxNewTokens,
     .always_written = true,
     .changes_output = true,
     .flag = "--max-new-tokens",
     .default_text = "32 (or the cap, if lower)",
     .help = "tokens generated, eos included",
     .openai = {"max_tokens", "max_completion_tokens"},
     .tgi = {"max_new_tokens"}},
    {.name = "num_beams",
     .member = &P::num_beams,
     .range = range::kNumBeams,
     .always_written = true,
     .changes_output = true,
     .flag = "--num-beams",
     .default_text = "",
     .help = "1 is greedy search, more is beam search with that many beams",
     .openai = kNo,
     .tgi = kNo},
    {.name = "length_penalty",
     .member = &P::length_penalty,
     .range = range::kLengthPenalty,
     .always_written = true,
     .changes_output = true,
     .flag = "--length-penalty",
     .default_text = "",
     .help = "beam score = sum of log-probs / length^length_penalty",
     .openai = kNo,
     .tgi = kNo},
    {.name = "min_new_tokens",
     .member = &P::min_new_tokens,
     .range = range::kMinNewTokens,
     .always_written = true,
     .changes_output = true,
     .flag = "--min-new-tokens",
     .default_text = "",
     .help = "eos is suppressed until this many tokens (at most max_new_tokens)",
     .openai = {"min_tokens"},  // vLLM's extension
     .tgi = kNo},
    {.name = "return_scores",
     .member = &P::return_scores,
     .range = {},
     .always_written = true,
     .changes_output = true,
     .flag = "--scores",
     .default_text = "",
     .help = "the reply carries one score per text (and --scores prints it)",
     .openai = kNo,
     .tgi = kNo},
    {.name = "priority",
     .member = &P::priority,
     .range = {.lo = 1, .hi = 0, .upper = UpperBound::kPriorityLevels},
     .always_written = false,
     .changes_output = false,
     .flag = "--priority",
     .default_text = "batcher.default_priority_level",
     .help = "1 the highest: batched before queued lower-priority requests; never changes the "
             "output",
     .openai = kNo,
     .tgi = kNo},
    {.name = "num_return_sequences",
     .member = &P::num_return_sequences,
     .range = range::kNumReturnSequences,
     .always_written = false,
     .changes_output = true,
     .flag = "--num-return-sequences",
     .default_text = "",
     .help = "beam hypotheses per text in the reply's sequences, best first (at most num_beams)",
     .openai = kNo,
     .tgi = kNo},
    {.name = "repetition_penalty",
     .member = &P::repetition_penalty,
     .range = range::kRepetitionPenalty,
     .always_written = false,
     .changes_output = true,
     .flag = "--repetition-penalty",
     .default_text = "",
     .help = "a seen token's logit is divided by it, multiplied when negative (1: none)",
     .openai = kNo,
     .tgi = {"repetition_penalty"}},
    {.name = "no_repeat_ngram_size",
     .member = &P::no_repeat_ngram_size,
     .range = range::kNoRepeatNgramSize,
     .always_written = false,
     .changes_output = true,
     .flag = "--no-repeat-ngram-size",
     .default_text = "",
     .help = "no n-gram of this many tokens occurs twice (0: none)",
     .openai = kNo,
     .tgi = kNo},
    {.name = "do_sample",
     .member = &P::do_sample,
     .range = {},
     .always_written = false,
     .changes_output = true,
     .flag = "--do-sample",
     .default_text = "",
     .help = "draw each token from the softmax instead of taking the most likely (num_beams 1)",
     .openai = kNo,  // OpenAI's temperature > 0 turns it on
     .tgi = {"do_sample"}},
    {.name = "temperature",
     .member = &P::temperature,
     .range = range::kTemperature,
     .always_written = false,
     .changes_output = true,
     .flag = "--temperature",
     .default_text = "",
     .help = "sampling: the logits are divided by it",
     .openai = {"temperature"},
     .tgi = {"temperature"}},
    {.name = "top_k",
     .member = &P::top_k,
     .range = range::kTopK,
     .always_written = false,
     .changes_output = true,
     .flag = "--top-k",
     .default_text = "",
     .help = "sampling: only the k most likely tokens (0: all)",
     .openai = kNo,
     .tgi = {"top_k"}},
    {.name = "top_p",
     .member = &P::top_p,
     .range = range::kTopP,
     .always_written = false,
     .changes_output = true,
     .flag = "--top-p",
     .default_text = "",
     .help = "sampling: only the smallest set of most likely tokens reaching this probability",
     .openai = {"top_p"},
     .tgi = {"top_p"}},
    {.name = "seed",
     .member = &P::seed,
     .range = range::kSeed,
     .always_written = false,
     .changes_output = true,
     .flag = "--seed",
     .default_text = "a random one",
     .help = "sampling: the same seed gives the same text",
     .openai = {"seed"},
     .tgi = {"seed"}},
    {.name = "stop",
     .member = &P::stop,
     .range = {},
     .always_written = false,
     .changes_output = true,
     .flag = "--stop",
     .default_text = "none",
     .help = "each text is cut before the first of these strings (repeatable)",
     .openai = {"stop"},
     .tgi = {"stop"}},
};
static_assert(std::size(kOptions) == kGenerateOptionCount);

// The parts one after the other (GCC 12 warns, wrongly, on chains of + over temporaries).
std::string join(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (const std::string_view part : parts) out.append(part);
  return out;
}

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

// An integer option's upper bound: a number, a limit's name (no limits given) or its value.
std::string hi_text(const OptionRange& r, const Limits* limits) {
  switch (r.upper) {
    case UpperBound::kMaxNewTokens:
      return limits ? std::to_string(limits->max_new_tokens_cap) : "max_new_tokens cap";
    case UpperBound::kMaxBeams:
      return limits ? std::to_string(limits->max_beams) : "max_beams";
    case UpperBound::kPriorityLevels:
      return limits ? std::to_string(limits->priority_levels) : "priority_levels";
    case UpperBound::kInt64Max:
      return "2^63-1";
    case UpperBound::kNone:
      break;
  }
  return std::to_string(static_cast<int64_t>(r.hi));
}

}  // namespace

std::span<const GenerateOption, kGenerateOptionCount> generate_options() {
  return std::span<const GenerateOption, kGenerateOptionCount>(kOptions);
}

const GenerateOption* find_generate_option(std::string_view name) {
  for (const GenerateOption& option : kOptions) {
    if (option.name == name) return &option;
  }
  return nullptr;
}

std::string_view type_name(const OptionMember& member) {
  constexpr std::string_view kNames[] = {"integer", "float or integer", "boolean", "integer",
                                         "array of strings"};
  return kNames[member.index()];
}

std::string range_text(const GenerateOption& option, const Limits* limits) {
  const OptionRange& r = option.range;
  if (std::holds_alternative<bool GenerateParams::*>(option.member)) return "";
  if (std::holds_alternative<std::vector<std::string> GenerateParams::*>(option.member)) {
    return join({"at most ", std::to_string(generation::kMaxStopSequences), " strings of 1..",
                 std::to_string(generation::kMaxStopBytes), " bytes of UTF-8"});
  }
  if (!std::holds_alternative<float GenerateParams::*>(option.member))
    return join({"[", std::to_string(static_cast<int64_t>(r.lo)), ", ", hi_text(r, limits), "]"});
  if (std::isinf(r.lo) && std::isinf(r.hi)) return "finite";
  if (std::isinf(r.hi)) return join({r.lo_open ? "> " : ">= ", number_text(r.lo)});
  return join({r.lo_open ? "(" : "[", number_text(r.lo), ", ", number_text(r.hi), "]"});
}

std::string default_text(const GenerateOption& option) {
  if (!option.default_text.empty()) return std::string(option.default_text);
  return value_text(option, GenerateParams{});
}

std::string value_text(const GenerateOption& option, const GenerateParams& params) {
  return std::visit(
      [&](auto member) -> std::string {
        const auto& value = params.*member;
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, bool>) {
          return value ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int>) {
          return std::to_string(value);
        } else if constexpr (std::is_same_v<T, float>) {
          return number_text(static_cast<double>(value));
        } else if constexpr (std::is_same_v<T, std::optional<uint64_t>>) {
          return value ? std::to_string(*value) : "";
        } else {
          std::string text;
          for (const std::string& s : value) text += std::to_string(s.size()) + ':' + s + '|';
          return text;
        }
      },
      option.member);
}

bool is_default(const GenerateOption& option, const GenerateParams& params) {
  static const GenerateParams kDefaults;
  return std::visit([&](auto member) { return params.*member == kDefaults.*member; },
                    option.member);
}

bool is_search_option(const GenerateOption& option) {
  static const GenerateParams params;
  const auto* search =
      reinterpret_cast<const char*>(static_cast<const generation::SearchOptions*>(&params));
  return std::visit(
      [&](auto member) {
        const auto* field = reinterpret_cast<const char*>(&(params.*member));
        return std::less_equal<>()(search, field) &&
               std::less<>()(field, search + sizeof(generation::SearchOptions));
      },
      option.member);
}

std::string options_markdown() {
  std::string out =
      "| option | type | default | range | `seqpipe send` | OpenAI | TGI | what it does |\n"
      "|---|---|---|---|---|---|---|---|\n";
  auto front = [](const FrontName& f) {
    if (!f.supported()) return std::string("-");
    std::string text = join({"`", f.name, "`"});
    if (!f.alias.empty()) text += join({", `", f.alias, "`"});
    return text;
  };
  for (const GenerateOption& o : kOptions) {
    out += join({"| `params.", o.name, "` | ", type_name(o.member), " | ", default_text(o), " | ",
                 range_text(o).empty() ? "-" : range_text(o), " | `", o.flag, "` | ",
                 front(o.openai), " | ", front(o.tgi), " | ", o.help, " |\n"});
  }
  return out;
}

std::string options_python() {
  auto quoted = [](std::string_view text) {
    std::string out = "\"";
    for (const char c : text) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  };
  std::string out =
      "\"\"\"The protocol's generation options (docs/PROTOCOL.md, the params table), one row "
      "each:\n"
      "written from the option table (common/protocol/src/generate_options.cc) by the test\n"
      "GenerateOptionsTest.ThePythonClientsTableIsTheTables, which SEQPIPE_UPDATE_DOCS=1 makes\n"
      "rewrite it. Not edited by hand: seqpipe_client.py takes its options from here.\"\"\"\n"
      "from collections import namedtuple\n\n"
      "Option = namedtuple(\"Option\", \"name type default range help\")\n\n"
      "OPTIONS = (\n";
  for (const GenerateOption& o : kOptions) {
    out += join({"    Option(", quoted(o.name), ", ", quoted(type_name(o.member)), ",\n           ",
                 quoted(default_text(o)), ", ", quoted(range_text(o)), ",\n           ",
                 quoted(o.help), "),\n"});
  }
  return out + ")\n";
}

}  // namespace seqpipe::protocol
