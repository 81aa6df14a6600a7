#pragma once
// PipelineConfig and LoadedConfig declared, not defined, with accessors to their parts: code that
// only passes the config on, or reads a few sections, includes this and the headers of the
// sections it reads (seqpipe/config/gateway_config.h, ...), so that editing one section's keys
// recompiles only what reads that section (the definitions are seqpipe/config/config.h's).

namespace seqpipe::config {

struct PipelineConfig;
struct LoadedConfig;

struct BatcherConfig;
struct DecoderConfig;
struct EncoderConfig;
struct GatewayConfig;
struct LivenessConfig;
struct MetricsConfig;
struct ModelConfig;
struct PostprocessorConfig;
struct SecurityConfig;
struct TokenizerConfig;

const ModelConfig& model_of(const PipelineConfig& config);
const LivenessConfig& liveness_of(const PipelineConfig& config);
const MetricsConfig& metrics_of(const PipelineConfig& config);
const GatewayConfig& gateway_of(const PipelineConfig& config);
const TokenizerConfig& tokenizer_of(const PipelineConfig& config);
const BatcherConfig& batcher_of(const PipelineConfig& config);
const EncoderConfig& encoder_of(const PipelineConfig& config);
const DecoderConfig& decoder_of(const PipelineConfig& config);
const PostprocessorConfig& postprocessor_of(const PipelineConfig& config);
const SecurityConfig& security_of(const PipelineConfig& config);
// The config a LoadedConfig holds (its layers are config.h's).
const PipelineConfig& pipeline_of(const LoadedConfig& loaded);

}  // namespace seqpipe::config
