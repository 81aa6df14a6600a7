#include "postprocessor/postprocessor_stage.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "text/text_frame.h"

namespace seqpipe::postprocessor {

std::string_view cut_before_stop(std::string_view text, const std::vector<std::string>& stop) {
  size_t end = text.size();
  for (const std::string& s : stop) end = std::min(end, text.find(s));
  return text.substr(0, end);
}

std::string_view stable_prefix(std::string_view text, const std::vector<std::string>& stop) {
  size_t end = cut_before_stop(text, stop).size();
  for (const std::string& s : stop) {
    const size_t from = text.size() >= s.size() ? text.size() - s.size() + 1 : 0;
    for (size_t p = from; p < end; ++p) {
      if (s.starts_with(text.substr(p))) {
        end = p;
        break;
      }
    }
  }
  const size_t space = text.substr(0, end).rfind(' ');
  return space == std::string_view::npos ? std::string_view() : text.substr(0, space + 1);
}

PostprocessorStage::PostprocessorStage(std::shared_ptr<const engine::Tokenizer> tokenizer,
                                       const config::PipelineConfig& config,
                                       metrics::StageMetrics& metrics, const TimeSource& time)
    : tokenizer_(std::move(tokenizer)),
      confusion_margin_(config.postprocessor.confusion_margin / 100.0),
      lower_case_words_(config.model.lower_case_words != 0),
      sure_change_{.votes = config.postprocessor.known_word_votes,
                   .margin = config.postprocessor.known_word_margin / 100.0},
      max_input_tokens_(static_cast<size_t>(config.model.max_input_tokens)),
      metrics_(metrics),
      time_(time),
      credits_(config.postprocessor.credits) {
  if (!config.postprocessor.known_words.empty()) {
    known_words_.emplace(KnownWords::load(config.postprocessor.known_words));
    spdlog::info("postprocessor: {} known words from {}", known_words_->size(),
                 config.postprocessor.known_words);
  }
  const auto& p = config.postprocessor;
  if (!p.user_words.empty()) {
    user_words_.emplace(KnownWords::load(p.user_words, "postprocessor.user_words"));
    spdlog::info("postprocessor: {} user words from {}", user_words_->size(), p.user_words);
  }
  if (!p.word_counts.empty()) {
    suggester_ = std::make_unique<const SpellSuggester>(
        p.aspell_dictionary,
        std::make_shared<const NoisyChannel>(NoisyChannel::load(p.word_counts, p.edit_counts)),
        ChannelWeights{});
  } else if (!p.aspell_dictionary.empty()) {
    suggester_ =
        std::make_unique<const SpellSuggester>(p.aspell_dictionary, p.aspell_left_words != 0);
  }
  if (!p.confusion_counts.empty()) {
    confusion_sets_.emplace(ConfusionSets::load(p.confusion_counts));
    spdlog::info("postprocessor: {} confusion sets from {}", confusion_sets_->sets(),
                 p.confusion_counts);
  }
}

void PostprocessorStage::handle(stage::StageMessage&& message, worker::WorkerOutbox& out) {
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
    const std::vector<int> ids(item.ids.begin(), item.ids.end());
    if (item.partial) {  // the gateway asks for none where the text is rewritten below
      stage::ResultItem result;
      result.request = item.request;
      result.index = item.index;
      result.partial = true;
      result.text = stable_prefix(tokenizer_->decode(ids), item.params.stop);
      out.result(item.gateway, std::move(result));
      continue;
    }
    // With the guard or the text frame, item.text holds the input (the tokenizer kept it).
    // The words the model saw: all, or the first that fit its limit (as the tokenizer cut them).
    std::optional<text::TextFrame> frame;
    std::string seen_text;
    size_t seen = 0;
    if (lower_case_words_) {
      if (user_words_) {
        frame.emplace(item.text, [&](std::string_view w) { return user_words_->contains(w); });
      } else {
        frame.emplace(item.text);
      }
      seen = frame->words_that_fit([&](std::string_view t) { return tokenizer_->encode(t).size(); },
                                   max_input_tokens_);
      seen_text = frame->model_text(seen);
    }
    std::string output = tokenizer_->decode(ids);
    // A beam search's hypotheses, best first, with their scores.
    std::vector<std::string> hypotheses = {output};
    for (const auto& alt : item.alternatives)
      hypotheses.push_back(tokenizer_->decode(std::vector<int>(alt.begin(), alt.end())));
    std::vector<float> scores = {item.score};
    scores.insert(scores.end(), item.alternative_scores.begin(), item.alternative_scores.end());
    // The other hypotheses the client asked for, as the model gave them, before known_words
    // picks among them all.
    const auto wanted = static_cast<size_t>(item.params.num_return_sequences);
    std::vector<std::string> alternatives;
    std::vector<float> alternative_scores;
    for (size_t k = 1; k < wanted && k < hypotheses.size(); ++k) {
      const std::string text = frame ? frame->restore(hypotheses[k], seen) : hypotheses[k];
      alternatives.emplace_back(cut_before_stop(text, item.params.stop));
      alternative_scores.push_back(k < scores.size() ? scores[k] : 0.0f);
    }
    if (known_words_) {
      // The first whose words the lists all know wins, else the best; all of them vote on
      // changes of known words.
      const auto known = std::find_if(hypotheses.begin(), hypotheses.end(),
                                      [&](const auto& h) { return known_words_->all_known(h); });
      if (known != hypotheses.end()) output = *known;
      output = known_words_->guard(frame ? seen_text : item.text, output, hypotheses, scores,
                                   sure_change_);
    }
    if (suggester_) {
      output = suggester_->choose(frame ? seen_text : item.text, output,
                                  known_words_ ? &*known_words_ : nullptr, hypotheses);
    }
    // After the choices above: the context decides between real words they all know.
    if (confusion_sets_) output = confusion_sets_->correct(output, confusion_margin_);
    if (frame) output = frame->restore(output, seen);
    // A stop sequence the model spelled with other tokens still ends the text here.
    if (!item.params.stop.empty()) {
      const size_t whole = output.size();
      output = std::string(cut_before_stop(output, item.params.stop));
      if (output.size() < whole) item.finish_reason = protocol::FinishReason::kStop;
    }
    const auto elapsed = time_.now().steady - start;
    metrics_.compute_time(std::chrono::duration<double>(elapsed).count());
    stage::ResultItem result;
    result.request = item.request;
    result.index = item.index;
    result.text = std::move(output);
    result.score = item.score;
    result.timings = item.timings;
    result.alternatives = std::move(alternatives);
    result.alternative_scores = std::move(alternative_scores);
    result.prompt_tokens = item.prompt_tokens;
    // The ids begin with the decoder start token, which nobody generated.
    result.completion_tokens = item.ids.empty() ? 0 : static_cast<uint32_t>(item.ids.size() - 1);
    result.finish_reason = item.finish_reason;
    result.timings.postprocess_us += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count());
    out.result(item.gateway, std::move(result));
  }
  if (credits > 0) out.answer(stage::Credit{credits});
}

}  // namespace seqpipe::postprocessor
