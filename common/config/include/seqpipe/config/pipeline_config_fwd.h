#pragma once
// PipelineConfig and LoadedConfig declared, not defined: a header that only passes them on by
// reference includes this, so that editing one section's keys recompiles only what reads it
// (the definitions are seqpipe/config/config.h's).

namespace seqpipe::config {

struct PipelineConfig;
struct LoadedConfig;

}  // namespace seqpipe::config
