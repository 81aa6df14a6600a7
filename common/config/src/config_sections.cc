// The accessors of pipeline_config_fwd.h: out of line, so that their callers need only the
// sections they read.
#include "seqpipe/config/config.h"

namespace seqpipe::config {

const ModelConfig& model_of(const PipelineConfig& config) {
  return config.model;
}
const LivenessConfig& liveness_of(const PipelineConfig& config) {
  return config.liveness;
}
const MetricsConfig& metrics_of(const PipelineConfig& config) {
  return config.metrics;
}
const GatewayConfig& gateway_of(const PipelineConfig& config) {
  return config.gateway;
}
const TokenizerConfig& tokenizer_of(const PipelineConfig& config) {
  return config.tokenizer;
}
const BatcherConfig& batcher_of(const PipelineConfig& config) {
  return config.batcher;
}
const EncoderConfig& encoder_of(const PipelineConfig& config) {
  return config.encoder;
}
const DecoderConfig& decoder_of(const PipelineConfig& config) {
  return config.decoder;
}
const PostprocessorConfig& postprocessor_of(const PipelineConfig& config) {
  return config.postprocessor;
}
const SecurityConfig& security_of(const PipelineConfig& config) {
  return config.security;
}
const PipelineConfig& pipeline_of(const LoadedConfig& loaded) {
  return loaded.config;
}

}  // namespace seqpipe::config
