#include "postprocessor/postprocessor_stage.h"
#include "seqpipe/config/config.h"

namespace seqpipe::postprocessor {

PostprocessorOptions postprocessor_options(const config::PipelineConfig& config) {
  return {.postprocessor = config.postprocessor,
          .lower_case_words = config.model.lower_case_words != 0,
          .max_input_tokens = config.model.max_input_tokens,
          .max_streams = config.batcher.max_queue_size};
}

}  // namespace seqpipe::postprocessor
