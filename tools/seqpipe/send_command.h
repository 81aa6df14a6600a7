#pragma once
// `seqpipe send`: one request to the gateway, its reply printed (texts, scores, timings, usage).
#include <cstdint>
#include <optional>
#include <string>

#include "seqpipe/cli/cli.h"
#include "seqpipe/protocol/protocol.h"
#include "seqpipe/runtime/service_main.h"

namespace seqpipe::supervisor {

struct SendArgs {
  service::ServiceFlags flags;
  int wait_s = 0;  // --wait: up to this many seconds for the pipeline to be ready
  std::string endpoint;
  protocol::Request request;
  std::optional<uint32_t> cancel_after_ms;
};

CLI::App* add_send_command(CLI::App& app, SendArgs& args);
// Exit status: 0 ok, 1 the pipeline answered an error or did not answer, 2 bad usage or config.
int send_command(SendArgs args);

}  // namespace seqpipe::supervisor
