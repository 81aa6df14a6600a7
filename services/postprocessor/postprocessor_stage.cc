#include "postprocessor/postprocessor_stage.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace seqpipe::postprocessor {

using SteadyClock = std::chrono::steady_clock;

PostprocessorStage::PostprocessorStage(std::shared_ptr<const engine::Tokenizer> tokenizer,
                                       const config::PipelineConfig& config,
                                       metrics::StageMetrics& metrics, const TimeSource& time)
    : tokenizer_(std::move(tokenizer)),
      metrics_(metrics),
      time_(time),
      credits_(config.postprocessor.credits) {
  if (!config.postprocessor.known_words.empty()) {
    known_words_.emplace(KnownWords::load(config.postprocessor.known_words));
    spdlog::info("postprocessor: {} known words from {}", known_words_->size(),
                 config.postprocessor.known_words);
  }
}

void PostprocessorStage::handle(stage::StageMessage&& message, worker::Outbox& out) {
  auto& items = std::get<stage::Postprocess>(message).items;
  const int credits = static_cast<int>(items.size());
  metrics_.request(credits);
  const Now now = time_.now();
  for (auto& item : items) {
    if (item.deadline.expired(now)) {
      metrics_.error(protocol::ErrorCode::kDeadlineExceeded);
      continue;
    }
    const auto start = time_.now().steady;
    std::string output = tokenizer_->decode(std::vector<int>(item.ids.begin(), item.ids.end()));
    if (known_words_) {
      // item.text holds the input (the tokenizer kept it). A beam search's hypotheses come best
      // first: the first whose words the lists all know wins, else the best.
      if (!known_words_->all_known(output)) {
        for (const auto& alt : item.alternatives) {
          std::string text = tokenizer_->decode(std::vector<int>(alt.begin(), alt.end()));
          if (known_words_->all_known(text)) {
            output = std::move(text);
            break;
          }
        }
      }
      output = known_words_->guard(item.text, output);
    }
    const auto elapsed = time_.now().steady - start;
    metrics_.compute_time(std::chrono::duration<double>(elapsed).count());
    stage::ResultItem result{item.request, item.index,   std::move(output),
                             item.score,   item.timings, std::nullopt};
    result.timings.postprocess_us += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count());
    out.result(item.gateway, std::move(result));
  }
  if (credits > 0) out.answer(stage::Credit{credits});
}

}  // namespace seqpipe::postprocessor
