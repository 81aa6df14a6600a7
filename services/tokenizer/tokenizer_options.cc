#include "seqpipe/config/batcher_config.h"
#include "seqpipe/config/model_config.h"
#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/config/postprocessor_config.h"
#include "seqpipe/config/tokenizer_config.h"
#include "tokenizer/tokenizer_stage.h"

namespace seqpipe::tokenizer {

TokenizerOptions tokenizer_options(const config::PipelineConfig& config) {
  const config::ModelConfig& model = config::model_of(config);
  const config::PostprocessorConfig& postprocessor = config::postprocessor_of(config);
  const bool lower_case_words = model.lower_case_words != 0;
  return {.ingress_endpoint = config::batcher_of(config).ingress_endpoint,
          .max_input_tokens = model.max_input_tokens,
          .credits = config::tokenizer_of(config).credits,
          .lower_case_words = lower_case_words,
          .keep_text = !postprocessor.known_words.empty() ||
                       !postprocessor.aspell_dictionary.empty() || lower_case_words};
}

}  // namespace seqpipe::tokenizer
