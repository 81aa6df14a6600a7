#include "decoder/decoder_stage.h"
#include "seqpipe/config/config.h"

namespace seqpipe::decoder {

DecoderOptions decoder_options(const config::PipelineConfig& config) {
  return {.num_slots = config.decoder.num_slots,
          .max_beams = config.decoder.max_beams,
          .max_new_tokens = config.decoder.max_new_tokens,
          .warmup_batch_size = config.decoder.warmup_batch_size,
          .max_input_tokens = config.model.max_input_tokens,
          .all_hypotheses = !config.postprocessor.known_words.empty() ||
                            !config.postprocessor.word_counts.empty()};
}

}  // namespace seqpipe::decoder
