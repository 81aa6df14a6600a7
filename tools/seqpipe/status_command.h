#pragma once
// `seqpipe status`: asks the running pipeline's hubs what they serve and see, and prints it;
// and the wait until the pipeline is ready that `seqpipe status --wait` and `send --wait` share.
#include <string>
#include <zmq.hpp>

#include "seqpipe/config/config.h"
#include "seqpipe/observability/status.h"
#include "seqpipe/runtime/service_main.h"

namespace seqpipe::supervisor {

// Asks the hubs until the pipeline is ready or `wait_s` seconds pass (0: once): `seqpipe up`
// warms its replicas up for seconds, and `seqpipe status --wait` or `send --wait` waits for it.
status::PipelineStatus ask_until_ready(zmq::context_t& context, const config::PipelineConfig& c,
                                       int wait_s);
// What a pipeline that is not ready lacks: "batcher (down), decoder".
std::string missing_text(const status::PipelineStatus& status);
// Exit status: 0 ready, 1 not ready or a hub did not answer, 2 bad usage or config.
int status_command(const service::ServiceArgs& args, int wait_s);

}  // namespace seqpipe::supervisor
