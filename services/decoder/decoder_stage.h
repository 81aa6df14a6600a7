#pragma once
// The decoder stage: continuous (iteration-level) batching over the engine's Generator. A
// sequence joins the running batch between two decode steps as soon as it arrives and leaves
// the moment it finishes; its KV-cache slots (num_beams of them) go back to the batcher as
// credits with its result, so the batcher never sends more than the free slots. Sequences whose
// deadline passes are cancelled between steps (their slots freed), and so are sequences whose
// client cancelled the request (a `cancel` from the batcher). Socket-free.
#include <chrono>
#include <memory>
#include <vector>

#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/engine/decoding.h"
#include "seqpipe/protocol/generate_options.h"
#include "seqpipe/runtime/worker.h"

namespace seqpipe::decoder {

// A request's generation parameters as the engine's decoding options (their SearchOptions part,
// engine::decoding_options), with the decoder's own rule: all_hypotheses: beam
// search returns every finished hypothesis (postprocessor.known_words: the postprocessor's pick
// chooses among them); else params.num_return_sequences of them. The engine validates the result.
engine::DecodingOptions decoding_options(const protocol::GenerateParams& params,
                                         bool all_hypotheses);

// What the decoder stage takes from the config.
struct DecoderOptions {
  int num_slots = 0;          // decoder.num_slots
  int max_beams = 0;          // decoder.max_beams
  int max_new_tokens = 0;     // decoder.max_new_tokens
  int warmup_batch_size = 0;  // decoder.warmup_batch_size
  int max_input_tokens = 0;   // model.max_input_tokens
  // postprocessor.known_words or word_counts is set: beam searches return all their hypotheses.
  bool all_hypotheses = false;
};
// The stage's options from the pipeline config (decoder_options.cc: the one file of the stage that
// reads the config, so that a key of another stage recompiles none of it).
DecoderOptions decoder_options(const config::PipelineConfig& config);

class DecoderStage : public worker::WorkerStage {
 public:
  DecoderStage(std::shared_ptr<const engine::T5Model> model, const DecoderOptions& options,
               metrics::StageMetrics& metrics, const TimeSource& time = system_time());
  stage::MessageKind accepts() const override { return stage::MessageKind::kDecode; }
  int capacity() const override { return num_slots_; }
  int free_capacity() const override { return generator_.free_slots(); }
  // Slots held by the running sequences of hub `hub`.
  int held(size_t hub) const override;
  void handle(stage::StageMessage&& message, worker::WorkerOutbox& out) override;
  // Stops the running sequences of the cancelled requests: their slots are free for the next
  // step and go back to the batcher as credits (a `decoded` message without items).
  void cancel(const stage::Cancel& message, worker::WorkerOutbox& out) override;
  bool has_pending_work() const override { return !running_.empty(); }
  // One decoder step over every running sequence; finished and expired ones leave.
  void work(worker::WorkerOutbox& out) override;
  // decoder.warmup_batch_size sequences (from zero encoder rows) decoded up to 4 steps, then
  // dropped.
  bool warm_up() override;

  int running() const { return static_cast<int>(running_.size()); }
  int free_slots() const { return generator_.free_slots(); }

 private:
  struct Running {
    uint64_t handle = 0;
    int slots = 0;
    stage::DecodedItem item;  // the output, ids and score filled in when it finishes
    std::chrono::steady_clock::time_point started;
    size_t hub = 0;  // the hub (batcher) that sent it: its result and slots go back there
  };
  void admit(stage::EncodedItem&& item, worker::WorkerOutbox& out, int& credits);

  std::shared_ptr<const engine::T5Model> model_;
  engine::Generator generator_;
  metrics::StageMetrics& metrics_;
  const TimeSource& time_;  // read for deadlines and stage timings (tests pass a ManualTime)
  int num_slots_;
  int max_source_len_;
  int warmup_batch_size_;
  int warmup_steps_;
  bool all_hypotheses_;                                // DecoderOptions::all_hypotheses
  std::vector<Running> running_;                       // reserved to num_slots
  std::vector<engine::Generator::Finished> finished_;  // reused between steps
};

}  // namespace seqpipe::decoder
