#include "tokenizer/tokenizer_stage.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "seqpipe/common/service.h"
#include "text/text_frame.h"

namespace seqpipe::tokenizer {

using SteadyClock = std::chrono::steady_clock;

TokenizerStage::TokenizerStage(std::shared_ptr<const engine::Tokenizer> tokenizer,
                               const config::PipelineConfig& config, metrics::StageMetrics& metrics)
    : tokenizer_(std::move(tokenizer)),
      metrics_(metrics),
      ingress_endpoint_(config.batcher.ingress_endpoint),
      max_input_tokens_(config.model.max_input_tokens),
      credits_(config.tokenizer.credits),
      lower_case_words_(config.model.lower_case_words != 0),
      keep_text_(!config.postprocessor.known_words.empty() || lower_case_words_) {}

std::vector<int> TokenizerStage::encode(const std::string& text) const {
  if (!lower_case_words_) return tokenizer_->encode(text);
  const text::TextFrame frame(text);
  const size_t seen =
      frame.words_that_fit([&](std::string_view t) { return tokenizer_->encode(t).size(); },
                           static_cast<size_t>(max_input_tokens_));
  return tokenizer_->encode(frame.model_text(seen));
}

void TokenizerStage::handle(stage::StageMessage&& message, worker::Outbox& out) {
  metrics_.request(static_cast<double>(message.items.size()));
  stage::StageMessage sequences{stage::MessageKind::kSequence, 0, {}};
  const int64_t now = service::unix_now_us();
  for (auto& item : message.items) {
    if (worker::expired(item, now)) {
      metrics_.error(protocol::ErrorCode::kDeadlineExceeded);  // the gateway has answered it
      continue;
    }
    const auto start = SteadyClock::now();
    std::vector<int> ids = encode(item.text);
    const auto elapsed = SteadyClock::now() - start;
    metrics_.compute_time(std::chrono::duration<double>(elapsed).count());
    if (static_cast<int>(ids.size()) > max_input_tokens_) {
      out.fail(std::move(item),
               {protocol::ErrorCode::kTooLong,
                "text " + std::to_string(item.index) + " is " + std::to_string(ids.size()) +
                    " tokens; the limit is model.max_input_tokens = " +
                    std::to_string(max_input_tokens_)},
               "tokenizer", metrics_);
      continue;
    }
    item.ids.assign(ids.begin(), ids.end());
    if (!keep_text_) item.text.clear();
    item.timings.tokenize_us += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count());
    sequences.items.push_back(std::move(item));
  }
  // To the batcher the gateway chose for each item (one message per batcher), else the configured
  // one.
  for (auto& item : sequences.items) {
    const std::string& to = item.batcher.empty() ? ingress_endpoint_ : item.batcher;
    auto it = std::find_if(out.pushes.begin(), out.pushes.end(), [&](const auto& p) {
      return p.first == to && p.second.kind == stage::MessageKind::kSequence;
    });
    if (it == out.pushes.end()) {
      out.pushes.emplace_back(to, stage::StageMessage{stage::MessageKind::kSequence, 0, {}});
      it = out.pushes.end() - 1;
    }
    it->second.items.push_back(std::move(item));
  }
  out.answer({stage::MessageKind::kCredit, 1, {}});
}

}  // namespace seqpipe::tokenizer
