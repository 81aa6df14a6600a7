#include "seqpipe/config/config.h"
#include "tokenizer/tokenizer_stage.h"

namespace seqpipe::tokenizer {

TokenizerOptions tokenizer_options(const config::PipelineConfig& config) {
  const bool lower_case_words = config.model.lower_case_words != 0;
  return {.ingress_endpoint = config.batcher.ingress_endpoint,
          .max_input_tokens = config.model.max_input_tokens,
          .credits = config.tokenizer.credits,
          .lower_case_words = lower_case_words,
          .keep_text = !config.postprocessor.known_words.empty() ||
                       !config.postprocessor.aspell_dictionary.empty() || lower_case_words};
}

}  // namespace seqpipe::tokenizer
