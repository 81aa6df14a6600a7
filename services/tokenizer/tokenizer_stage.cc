#include "tokenizer/tokenizer_stage.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "text/text_frame.h"

namespace seqpipe::tokenizer {

TokenizerStage::TokenizerStage(std::shared_ptr<const engine::Tokenizer> tokenizer,
                               const TokenizerOptions& options, metrics::StageMetrics& metrics,
                               const TimeSource& time)
    : tokenizer_(std::move(tokenizer)), metrics_(metrics), time_(time), options_(options) {}

std::vector<int> TokenizerStage::encode(const std::string& text) const {
  if (!options_.lower_case_words) return tokenizer_->encode(text);
  const text::TextFrame frame(text);
  const size_t seen =
      frame.words_that_fit([&](std::string_view t) { return tokenizer_->encode(t).size(); },
                           static_cast<size_t>(options_.max_input_tokens));
  return tokenizer_->encode(frame.model_text(seen));
}

void TokenizerStage::handle(stage::StageMessage&& message, worker::WorkerOutbox& out) {
  auto& items = std::get<stage::Tokenize>(message).items;
  metrics_.request(static_cast<double>(items.size()));
  // (batcher ingress, sequence): to the batcher the gateway chose for each item, else the
  // configured one; pushed after the failures, one message per batcher.
  std::vector<std::pair<std::string, stage::SequenceItem>> sequences;
  const Now now = time_.now();
  for (auto& item : items) {
    if (item.deadline.expired(now)) {
      metrics_.error(protocol::ErrorCode::kDeadlineExceeded);  // the gateway has answered it
      continue;
    }
    const auto start = time_.now().steady;
    std::vector<int> ids = encode(item.text);
    const auto elapsed = time_.now().steady - start;
    metrics_.compute_time(std::chrono::duration<double>(elapsed).count());
    if (static_cast<int>(ids.size()) > options_.max_input_tokens) {
      out.fail(item,
               {protocol::ErrorCode::kTooLong,
                "text " + std::to_string(item.index) + " is " + std::to_string(ids.size()) +
                    " tokens; the limit is model.max_input_tokens = " +
                    std::to_string(options_.max_input_tokens)},
               "tokenizer", metrics_);
      continue;
    }
    std::string to = item.batcher.empty() ? options_.ingress_endpoint : std::move(item.batcher);
    std::string text = options_.keep_text ? std::move(item.text) : std::string();
    auto sequence = stage::next_hop<stage::SequenceItem>(std::move(item));
    sequence.ids.assign(ids.begin(), ids.end());
    sequence.prompt_tokens = static_cast<uint32_t>(ids.size());
    sequence.text = std::move(text);
    // Each stop string's own tokens, for the decoder to end there. In context the text may be
    // tokenized otherwise: then decoding runs on and the postprocessor's cut alone applies.
    for (const std::string& stop : sequence.params.stop) {
      std::vector<int> stop_ids = tokenizer_->encode(stop);
      if (!stop_ids.empty() && stop_ids.back() == tokenizer_->eos_id()) stop_ids.pop_back();
      if (!stop_ids.empty()) sequence.stop_ids.emplace_back(stop_ids.begin(), stop_ids.end());
    }
    sequence.timings.tokenize_us += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count());
    sequences.emplace_back(std::move(to), std::move(sequence));
  }
  for (auto& [to, sequence] : sequences)
    out.push_to<stage::Sequence>(to).items.push_back(std::move(sequence));
  out.answer(stage::Credit{1});
}

}  // namespace seqpipe::tokenizer
