#pragma once
// The generation options: the one table that defines each of them (name, type, range, help, and
// how every front door and the engine name it). The msgpack codec, the response cache key, the
// OpenAI, TGI and KServe v2 (HTTP and gRPC) front doors, `seqpipe send`, `seqpipe-generate` and
// docs/PROTOCOL.md's option table all read it; their defaults are GenerateParams' own.
// Adding an option: a member of GenerateParams (or of generation::SearchOptions, with its range
// there, when the engine takes it), a row in generate_options.cc, the engine's code.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "seqpipe/protocol/protocol.h"

namespace seqpipe::protocol {

// Where an option lives in GenerateParams; the alternative is its type.
using OptionMember = std::variant<int GenerateParams::*, float GenerateParams::*,
                                  bool GenerateParams::*, std::optional<uint64_t> GenerateParams::*,
                                  std::vector<std::string> GenerateParams::*>;

// The values an option accepts: the engine's own ranges for the search's options
// (generation::range). Strings (stop): at most generation::kMaxStopSequences of
// 1..generation::kMaxStopBytes bytes of UTF-8.
using generation::OptionRange;
using generation::UpperBound;

// How one front door names an option: by one or two names of its own, or not at all (an
// explicit choice, so that a new row cannot go unmapped unnoticed: there is no default).
struct FrontName {
  constexpr FrontName(std::string_view name, std::string_view alias = {})
      : name(name), alias(alias) {}
  static constexpr FrontName unsupported() { return FrontName(std::string_view()); }
  constexpr bool supported() const { return !name.empty(); }

  std::string_view name;
  std::string_view alias;  // a second name for the same option (OpenAI's max_completion_tokens)
};

struct GenerateOption {
  std::string_view name;  // the msgpack key, /v1/generate's and KServe's parameter name
  OptionMember member;
  OptionRange range;
  // Written by encoders even at its default (the five of protocol v1's first release); the
  // others only when set, so a server that predates them reads requests that do not use them.
  bool always_written;
  bool changes_output;            // false: a scheduling hint the response cache ignores
  std::string_view flag;          // `seqpipe send`'s and seqpipe-generate's
  std::string_view default_text;  // the default as the docs say it; empty: GenerateParams'
  std::string_view help;          // one line, for --help and the docs
  FrontName openai;               // /v1/completions and /v1/chat/completions
  FrontName tgi;                  // /generate, /generate_stream: `parameters`
};

inline constexpr size_t kGenerateOptionCount = 15;
std::span<const GenerateOption, kGenerateOptionCount> generate_options();
// The row named `name` (the protocol's name), or null.
const GenerateOption* find_generate_option(std::string_view name);

// Whether the option's value is a list of strings (stop): a front door whose values are scalars
// takes one string as a list of one.
inline bool takes_list(const GenerateOption& option) {
  return std::holds_alternative<std::vector<std::string> GenerateParams::*>(option.member);
}

// What each type is called in the docs ("integer", "float or integer", ...).
std::string_view type_name(const OptionMember& member);
// The range as the docs and errors say it: "[1, 256]" with `limits`' bounds, or with none
// given, "[1, max_new_tokens cap]"; "> 0", "(0, 1]", "finite", "" for a boolean.
std::string range_text(const GenerateOption& option, const Limits* limits = nullptr);
// The default as the docs say it.
std::string default_text(const GenerateOption& option);
// The option's value in `params` as text ("1", "0.5", "true", "" when unset, stops joined
// with their lengths so that no two lists read alike): the response cache key's pieces.
std::string value_text(const GenerateOption& option, const GenerateParams& params);

// Whether the option holds GenerateParams' default in `params`.
bool is_default(const GenerateOption& option, const GenerateParams& params);

// Whether the option is one of the search's (a generation::SearchOptions member, which the
// engine takes as it is), not one of the serving layers' own (priority; stop, which the
// tokenizer turns into the engine's stop ids).
bool is_search_option(const GenerateOption& option);

// docs/PROTOCOL.md's option table, as markdown.
std::string options_markdown();
// clients/python/seqpipe_options.py: the table as the Python client reads it (each row's name,
// type, default, range and help).
std::string options_python();

}  // namespace seqpipe::protocol
