#pragma once
// The tokenizer stage: text -> SentencePiece ids (eos appended), checked against
// model.max_input_tokens. Good items go on to the batcher's ingress; a text that is too long is
// answered to its gateway as `too_long` (with model.lower_case_words: cut to what fits).
// Socket-free: run_worker drives it.
#include <memory>
#include <string>

#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/engine/tokenizer.h"
#include "seqpipe/runtime/worker.h"

namespace seqpipe::tokenizer {

// What the tokenizer stage takes from the config.
struct TokenizerOptions {
  std::string ingress_endpoint;   // batcher.ingress_endpoint: where items go by default
  int max_input_tokens = 0;       // model.max_input_tokens
  int credits = 0;                // tokenizer.credits
  bool lower_case_words = false;  // model.lower_case_words
  // The input text travels on to the postprocessor: its known-words guard, Aspell or the text
  // frame needs it (postprocessor.known_words, postprocessor.aspell_dictionary, lower_case_words).
  bool keep_text = false;
};
// The stage's options from the pipeline config (tokenizer_options.cc: the one file of the stage
// that reads the config, so that a key of another stage recompiles none of it).
TokenizerOptions tokenizer_options(const config::PipelineConfig& config);

class TokenizerStage : public worker::WorkerStage {
 public:
  TokenizerStage(std::shared_ptr<const engine::Tokenizer> tokenizer,
                 const TokenizerOptions& options, metrics::StageMetrics& metrics,
                 const TimeSource& time = system_time());
  stage::MessageKind accepts() const override { return stage::MessageKind::kTokenize; }
  int capacity() const override { return options_.credits; }
  // A `tokenize` message costs its sender one credit; the credit goes back after it.
  void handle(stage::StageMessage&& message, worker::WorkerOutbox& out) override;

 private:
  // The ids the model sees. With model.lower_case_words, a text whose words are over the limit
  // gives the model the longest prefix of them that fits (TextFrame::words_that_fit; the
  // postprocessor cuts the same way), and the rest passes through uncorrected; no `too_long`.
  std::vector<int> encode(const std::string& text) const;

  std::shared_ptr<const engine::Tokenizer> tokenizer_;
  metrics::StageMetrics& metrics_;
  const TimeSource& time_;  // read for deadlines and stage timings (tests pass a ManualTime)
  const TokenizerOptions options_;
};

}  // namespace seqpipe::tokenizer
