#pragma once
// The generation options' flags (`seqpipe send`, seqpipe-generate), one per row of the option
// table (seqpipe/protocol/generate_options.h) under its flag, with its help text: a new row is a
// new flag in both. Values are checked as numbers here and against their ranges by the server
// (or by the engine, for seqpipe-generate).
#include <CLI/CLI.hpp>
#include <string>

#include "seqpipe/protocol/generate_options.h"

namespace seqpipe::cli {

// Which rows a program offers; null: every one.
using OptionFilter = bool (*)(const protocol::GenerateOption&);

// Adds each wanted row's flag, writing into `params`; each flag's description is the row's help
// and its default.
void add_generate_options(CLI::App& app, protocol::GenerateParams& params,
                          OptionFilter wanted = nullptr);

// The wanted rows as usage lines: "  --top-k N   sampling: ... (default: 50)", the flags padded
// to one column.
std::string generate_options_usage(OptionFilter wanted = nullptr);

}  // namespace seqpipe::cli
