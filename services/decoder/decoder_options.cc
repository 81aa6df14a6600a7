#include "decoder/decoder_stage.h"
#include "seqpipe/config/decoder_config.h"
#include "seqpipe/config/model_config.h"
#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/config/postprocessor_config.h"

namespace seqpipe::decoder {

DecoderOptions decoder_options(const config::PipelineConfig& config) {
  const config::DecoderConfig& decoder = config::decoder_of(config);
  const config::PostprocessorConfig& postprocessor = config::postprocessor_of(config);
  return {
      .num_slots = decoder.num_slots,
      .max_beams = decoder.max_beams,
      .max_new_tokens = decoder.max_new_tokens,
      .warmup_batch_size = decoder.warmup_batch_size,
      .max_input_tokens = config::model_of(config).max_input_tokens,
      .all_hypotheses = !postprocessor.known_words.empty() || !postprocessor.word_counts.empty()};
}

}  // namespace seqpipe::decoder
