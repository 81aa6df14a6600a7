#include "encoder/encoder_stage.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <optional>

namespace seqpipe::encoder {

EncoderStage::EncoderStage(std::shared_ptr<const engine::T5Model> model,
                           const EncoderOptions& options, metrics::StageMetrics& metrics,
                           const TimeSource& time)
    : encoder_(std::move(model)),
      metrics_(metrics),
      time_(time),
      credits_(options.credits),
      warmup_batch_size_(options.warmup_batch_size),
      warmup_tokens_(std::max(1, options.max_input_tokens / 2)) {}

bool EncoderStage::warm_up() {
  if (warmup_batch_size_ == 0) return false;
  // Ids 3.. are ordinary pieces in any T5 vocabulary (0 pad, 1 eos, 2 unk).
  std::vector<std::vector<int>> batch(static_cast<size_t>(warmup_batch_size_),
                                      std::vector<int>(static_cast<size_t>(warmup_tokens_), 3));
  for (auto& seq : batch) seq.back() = 1;
  encoder_.encode(batch);
  return true;
}

void EncoderStage::handle(stage::StageMessage&& message, worker::WorkerOutbox& out) {
  auto& items = std::get<stage::Encode>(message).items;
  metrics_.request(static_cast<double>(items.size()));
  stage::Encoded encoded{1, {}};  // the batch's credit comes back
  const Now now = time_.now();
  batch_.clear();
  std::vector<stage::SequenceItem*> batched;
  for (auto& item : items) {
    if (item.deadline.expired(now)) {
      metrics_.error(protocol::ErrorCode::kDeadlineExceeded);
      metrics_.expired_before_compute();
    } else if (item.ids.empty()) {
      out.fail(item, {protocol::ErrorCode::kInternal, "encoder received an item without input ids"},
               "encoder", metrics_);
    } else {
      batch_.emplace_back(item.ids.begin(), item.ids.end());
      batched.push_back(&item);
    }
  }
  if (!batch_.empty()) {
    metrics_.batch_size(static_cast<double>(batch_.size()));
    const auto start = time_.now().steady;
    std::optional<engine::EncoderOutput> output;
    try {
      output = encoder_.encode(batch_);
    } catch (const std::exception& e) {  // a bad token id (model and tokenizer disagree), or OOM
      for (auto* item : batched) {
        out.fail(*item, {protocol::ErrorCode::kInternal, std::string("encoder: ") + e.what()},
                 "encoder", metrics_);
      }
    }
    if (output) {
      const int64_t d_model = output->hidden.dim(1);
      const size_t first = encoded.items.size();
      for (size_t i = 0; i < batched.size(); ++i) {
        std::string text = std::move(batched[i]->text);
        auto item = stage::next_hop<stage::EncodedItem>(std::move(*batched[i]));
        item.hidden.rows = output->length(i);
        // The one copy of the rows on this side: from the model's batch (on its device) into
        // the frame that ZeroMQ sends in place.
        item.hidden.values =
            stage::TensorFrame::floats(static_cast<size_t>(item.hidden.rows * d_model),
                                       [&](float* rows) { output->copy_sequence(i, rows); });
        item.text = std::move(text);
        encoded.items.push_back(std::move(item));
      }
      // Taken after the rows' copies: on a GPU the copy waits for the encoder's kernels, so
      // `encode` is the encoder's whole time, not the time to launch it.
      const auto elapsed = time_.now().steady - start;
      metrics_.compute_time(std::chrono::duration<double>(elapsed).count());
      const auto us = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count());
      for (size_t i = first; i < encoded.items.size(); ++i)
        encoded.items[i].timings.encode_us += us;
    }
  }
  out.answer(std::move(encoded));
}

}  // namespace seqpipe::encoder
