#pragma once
// `seqpipe-bench sweep`: model_analyzer for seqpipe. Starts a private pipeline per combination of
// config values, measures each with a closed-loop concurrency sweep, ranks them under an SLO.
#include <string_view>

namespace seqpipe::bench {

// argv: "sweep", options... Returns the exit status; throws cli::UsageError on bad usage.
int sweep_main(int argc, char** argv, std::string_view usage);

}  // namespace seqpipe::bench
