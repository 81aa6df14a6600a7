#include "postprocessor/postprocessor_stage.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "postprocessor/final_words.h"
#include "text/word_alignment.h"

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

PostprocessorStage::Seen PostprocessorStage::seen_input(const std::string& input) const {
  // With the guard or the text frame, the item's text holds the input (the tokenizer kept it).
  // The words the model saw: all, or the first that fit its limit (as the tokenizer cut them).
  Seen seen;
  if (!lower_case_words_) {
    seen.text = input;
    return seen;
  }
  if (user_words_) {
    seen.frame.emplace(input, [&](std::string_view w) { return user_words_->contains(w); });
  } else {
    seen.frame.emplace(input);
  }
  seen.words = seen.frame->words_that_fit(
      [&](std::string_view t) { return tokenizer_->encode(t).size(); }, max_input_tokens_);
  seen.text = seen.frame->model_text(seen.words);
  return seen;
}

std::string PostprocessorStage::rewrite(const std::string& seen, std::string output,
                                        const std::vector<std::string>& hypotheses,
                                        const std::vector<float>& scores,
                                        std::vector<std::string>* steps) const {
  if (steps) steps->push_back(output);
  if (known_words_) {
    // The first whose words the lists all know wins, else the best; all of them vote on
    // changes of known words.
    const auto known = std::find_if(hypotheses.begin(), hypotheses.end(),
                                    [&](const auto& h) { return known_words_->all_known(h); });
    if (known != hypotheses.end()) output = *known;
    output = known_words_->guard(seen, output, hypotheses, scores, sure_change_);
    if (steps) steps->push_back(output);
  }
  if (suggester_) {
    output = suggester_->choose(seen, output, known_words_ ? &*known_words_ : nullptr, hypotheses);
    if (steps) steps->push_back(output);
  }
  // After the choices above: the context decides between real words they all know.
  if (confusion_sets_) {
    output = confusion_sets_->correct(output, confusion_margin_);
    if (steps) steps->push_back(output);
  }
  return output;
}

std::string PostprocessorStage::partial_text(const stage::DecodedItem& item,
                                             const std::vector<int>& ids) const {
  const std::string decoded = tokenizer_->decode(ids);
  const std::string_view stable = stable_prefix(decoded, item.params.stop);
  if (!rewrites_text()) return std::string(stable);
  // Each partial is worked out whole (the batcher keeps only a sequence's newest one waiting, so
  // the one that completed a word may never come here).
  const size_t decoded_words = text::split_words(stable).size();
  // The output as if the model copied the rest of the input after its complete words: the
  // rewrites of the final words do not depend on what comes after them (final_words.h).
  const Seen seen = seen_input(item.text);
  const auto input = text::split_words(seen.text);
  std::string copied(stable);  // ends with a space where it has words
  for (size_t k = decoded_words; k < input.size(); ++k) (copied += input[k]) += ' ';
  std::vector<std::string> steps;
  const std::string output = rewrite(seen.text, copied, {copied}, {item.score}, &steps);
  std::vector<std::vector<std::string_view>> alignments;
  for (const auto& step : steps) alignments.push_back(text::split_words(step));
  const size_t final = final_words(input, alignments, decoded_words, [&](std::string_view w) {
    return confusion_sets_ && confusion_sets_->contains(w);
  });
  if (final == 0) return {};
  // Up to where the first word that is not final begins, the bytes before it included.
  std::string text;
  if (seen.frame) {
    std::vector<size_t> begins;
    text = seen.frame->restore(output, seen.words, &begins);
    if (final < begins.size()) text.resize(begins[final]);
  } else {
    // Up to the next word, or to the end of the last one (a longer output goes on after it).
    const auto words = text::split_words(output);
    const char* end = final < words.size() ? words[final].data()
                                           : words[final - 1].data() + words[final - 1].size();
    text = output.substr(0, static_cast<size_t>(end - output.data()));
  }
  // Before anything that is or may become a stop sequence.
  if (!item.params.stop.empty()) text = stable_prefix(text, item.params.stop);
  return text;
}

std::string PostprocessorStage::final_text(stage::DecodedItem& item, const std::vector<int>& ids,
                                           std::vector<std::string>& alternatives,
                                           std::vector<float>& alternative_scores) const {
  const Seen seen = seen_input(item.text);
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
  for (size_t k = 1; k < wanted && k < hypotheses.size(); ++k) {
    const std::string text =
        seen.frame ? seen.frame->restore(hypotheses[k], seen.words) : hypotheses[k];
    alternatives.emplace_back(cut_before_stop(text, item.params.stop));
    alternative_scores.push_back(k < scores.size() ? scores[k] : 0.0f);
  }
  output = rewrite(seen.text, std::move(output), hypotheses, scores, nullptr);
  if (seen.frame) output = seen.frame->restore(output, seen.words);
  // A stop sequence the model spelled with other tokens still ends the text here.
  if (!item.params.stop.empty()) {
    const size_t whole = output.size();
    output = std::string(cut_before_stop(output, item.params.stop));
    if (output.size() < whole) item.finish_reason = protocol::FinishReason::kStop;
  }
  return output;
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
    stage::ResultItem result;
    result.request = item.request;
    result.index = item.index;
    if (item.partial) {
      result.partial = true;
      result.text = partial_text(item, ids);
      out.result(item.gateway, std::move(result));
      continue;
    }
    result.text = final_text(item, ids, result.alternatives, result.alternative_scores);
    const auto elapsed = time_.now().steady - start;
    metrics_.compute_time(std::chrono::duration<double>(elapsed).count());
    result.score = item.score;
    result.timings = item.timings;
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
