#pragma once
// The encoder stage: one batch of input ids -> encoder hidden states, one block of rows per
// item (stage::EncoderRows), returned to the batcher for the decoders. A batch costs the batcher
// one credit, returned with the `encoded` reply. Socket-free.
#include <memory>

#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/engine/encoder.h"
#include "seqpipe/runtime/worker.h"

namespace seqpipe::encoder {

// What the encoder stage takes from the config.
struct EncoderOptions {
  int credits = 0;            // encoder.credits
  int warmup_batch_size = 0;  // encoder.warmup_batch_size
  int max_input_tokens = 0;   // model.max_input_tokens
};
// The stage's options from the pipeline config (encoder_options.cc: the one file of the stage that
// reads the config, so that a key of another stage recompiles none of it).
EncoderOptions encoder_options(const config::PipelineConfig& config);

class EncoderStage : public worker::WorkerStage {
 public:
  EncoderStage(std::shared_ptr<const engine::T5Model> model, const EncoderOptions& options,
               metrics::StageMetrics& metrics, const TimeSource& time = system_time());
  stage::MessageKind accepts() const override { return stage::MessageKind::kEncode; }
  int capacity() const override { return credits_; }
  void handle(stage::StageMessage&& message, worker::WorkerOutbox& out) override;
  // encoder.warmup_batch_size sequences of model.max_input_tokens / 2 tokens.
  bool warm_up() override;

 private:
  engine::Encoder encoder_;
  metrics::StageMetrics& metrics_;
  const TimeSource& time_;  // read for deadlines and stage timings (tests pass a ManualTime)
  int credits_;
  int warmup_batch_size_, warmup_tokens_;
  std::vector<std::vector<int>> batch_;  // reused between batches
};

}  // namespace seqpipe::encoder
