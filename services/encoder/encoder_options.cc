#include "encoder/encoder_stage.h"
#include "seqpipe/config/config.h"

namespace seqpipe::encoder {

EncoderOptions encoder_options(const config::PipelineConfig& config) {
  return {.credits = config.encoder.credits,
          .warmup_batch_size = config.encoder.warmup_batch_size,
          .max_input_tokens = config.model.max_input_tokens};
}

}  // namespace seqpipe::encoder
