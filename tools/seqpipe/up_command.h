#pragma once
// `seqpipe up`: the whole pipeline on this machine as child processes, supervised; with a model
// repository, its control plane too (model_supervision.h).
#include <string>

#include "seqpipe/cli/cli.h"
#include "seqpipe/runtime/service_main.h"

namespace seqpipe::supervisor {

struct UpArgs {
  service::ServiceFlags flags;
  std::string repository;  // --repository DIR: --set model.repository=DIR
};

CLI::App* add_up_command(CLI::App& app, UpArgs& args);
// Exit status: 0 stopped, 1 a child kept failing, 2 bad usage, config or model directory.
int up_command(UpArgs args);

}  // namespace seqpipe::supervisor
