#pragma once
// `seqpipe models list|load|unload`: the model control requests of `seqpipe up --repository`,
// asked on its control socket (config::control_endpoint; model_control.h).
#include <optional>
#include <string>

#include "seqpipe/cli/cli.h"
#include "seqpipe/runtime/service_main.h"

namespace seqpipe::supervisor {

struct ModelsArgs {
  service::ServiceFlags flags;
  std::string action;  // list, load, unload
  std::string name;
  std::optional<int> version;
};

CLI::App* add_models_command(CLI::App& app, ModelsArgs& args);
// Exit status: 0 done, 1 refused or no answer, 2 bad usage or config.
int models_command(ModelsArgs args);

}  // namespace seqpipe::supervisor
