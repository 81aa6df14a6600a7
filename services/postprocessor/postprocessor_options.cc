#include "postprocessor/postprocessor_stage.h"
#include "seqpipe/config/batcher_config.h"
#include "seqpipe/config/model_config.h"
#include "seqpipe/config/pipeline_config_fwd.h"

namespace seqpipe::postprocessor {

PostprocessorOptions postprocessor_options(const config::PipelineConfig& config) {
  const config::ModelConfig& model = config::model_of(config);
  return {.postprocessor = config::postprocessor_of(config),
          .lower_case_words = model.lower_case_words != 0,
          .max_input_tokens = model.max_input_tokens,
          .max_streams = config::batcher_of(config).max_queue_size};
}

}  // namespace seqpipe::postprocessor
