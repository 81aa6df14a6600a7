#include "encoder/encoder_stage.h"
#include "seqpipe/config/encoder_config.h"
#include "seqpipe/config/model_config.h"
#include "seqpipe/config/pipeline_config_fwd.h"

namespace seqpipe::encoder {

EncoderOptions encoder_options(const config::PipelineConfig& config) {
  const config::EncoderConfig& encoder = config::encoder_of(config);
  return {.credits = encoder.credits,
          .warmup_batch_size = encoder.warmup_batch_size,
          .max_input_tokens = config::model_of(config).max_input_tokens};
}

}  // namespace seqpipe::encoder
