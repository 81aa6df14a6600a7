#include "postprocessor/postprocessor_stage.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "postprocessor/final_words.h"
#include "text/word_alignment.h"

namespace seqpipe::postprocessor {
namespace {

// words[from..] one space apart.
std::string joined_from(const std::vector<std::string_view>& words, size_t from) {
  std::string out;
  for (size_t k = from; k < words.size(); ++k) {
    if (k > from) out += ' ';
    out += words[k];
  }
  return out;
}

// `text` from its word `n` on (empty when it has no more words).
std::string_view from_word(std::string_view text, size_t n) {
  const auto words = text::split_words(text);
  if (n >= words.size()) return {};
  return text.substr(static_cast<size_t>(words[n].data() - text.data()));
}

}  // namespace

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
                                       const PostprocessorOptions& options,
                                       metrics::StageMetrics& metrics, const TimeSource& time)
    : tokenizer_(std::move(tokenizer)),
      confusion_margin_(options.postprocessor.confusion_margin / 100.0),
      lower_case_words_(options.lower_case_words),
      sure_change_{.votes = options.postprocessor.known_word_votes,
                   .margin = options.postprocessor.known_word_margin / 100.0},
      max_input_tokens_(static_cast<size_t>(options.max_input_tokens)),
      metrics_(metrics),
      time_(time),
      credits_(options.postprocessor.credits),
      max_streams_(static_cast<size_t>(options.max_streams)) {
  const config::PostprocessorConfig& p = options.postprocessor;
  if (!p.known_words.empty()) {
    known_words_.emplace(KnownWords::load(p.known_words));
    spdlog::info("postprocessor: {} known words from {}", known_words_->size(), p.known_words);
  }
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
                                        std::vector<std::string>* steps,
                                        std::string_view confusion_left,
                                        SpellSuggester::Suggestions* asked) const {
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
    output = suggester_->choose(seen, output, known_words_ ? &*known_words_ : nullptr, hypotheses,
                                asked);
    if (steps) steps->push_back(output);
  }
  // After the choices above: the context decides between real words they all know.
  if (confusion_sets_) {
    if (confusion_left.empty()) {
      output = confusion_sets_->correct(output, confusion_margin_);
    } else {
      const std::string whole =
          confusion_sets_->correct(std::string(confusion_left) + output, confusion_margin_);
      output = from_word(whole, text::split_words(confusion_left).size());
    }
    if (steps) steps->push_back(output);
  }
  return output;
}

PostprocessorStage::Stream& PostprocessorStage::stream_of(const stage::DecodedItem& item) {
  const auto [it, added] = streams_.try_emplace(StreamKey{item.gateway, item.request, item.index});
  it->second.used = ++stream_clock_;
  if (added) {
    it->second.seen = seen_input(item.text);
    if (streams_.size() > max_streams_) {
      streams_.erase(std::min_element(streams_.begin(), streams_.end(), [](auto& a, auto& b) {
        return a.second.used < b.second.used;
      }));
    }
  }
  return it->second;
}

PostprocessorStage::Stream* PostprocessorStage::find_stream(const stage::DecodedItem& item) {
  if (!item.stream) return nullptr;
  const auto it = streams_.find(StreamKey{item.gateway, item.request, item.index});
  return it == streams_.end() ? nullptr : &it->second;
}

void PostprocessorStage::end_stream(const stage::DecodedItem& item) {
  if (item.stream) streams_.erase(StreamKey{item.gateway, item.request, item.index});
}

std::vector<std::vector<std::string>> PostprocessorStage::rewritten_steps(
    Stream& stream, const std::vector<std::string_view>& input,
    const std::vector<std::string_view>& output, float score) const {
  const size_t kept = stream.words;
  // The confusion sets decide a word by the two words on each side: those before the rest, as
  // the step before them made them.
  std::string left;
  if (confusion_sets_ && kept > 0) {
    const auto& before = stream.steps[stream.steps.size() - 2];
    for (size_t k = kept >= 2 ? kept - 2 : 0; k < kept; ++k) (left += before[k]) += ' ';
  }
  // The rewrites align the input's words with the output's and resolve each gap alone: the
  // final words end every alignment's gaps (final_words.h), so the rest aligns on its own as it
  // did within the whole.
  const std::string rest = joined_from(output, kept);
  std::vector<std::string> rest_steps;
  rewrite(joined_from(input, kept), rest, {rest}, {score}, &rest_steps, left, &stream.suggestions);
  std::vector<std::vector<std::string>> steps(rest_steps.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    if (kept > 0) steps[s] = stream.steps[s];
    for (const auto word : text::split_words(rest_steps[s])) steps[s].emplace_back(word);
  }
  return steps;
}

std::string PostprocessorStage::partial_text(const stage::DecodedItem& item,
                                             const std::vector<int>& ids) {
  const std::string decoded = tokenizer_->decode(ids);
  const std::string_view stable = stable_prefix(decoded, item.params.stop);
  if (!rewrites_text()) return std::string(stable);
  // The batcher keeps only a sequence's newest partial waiting, so the one that completed a word
  // may never come here: each partial works out every word after the stream's final ones.
  Stream& stream = stream_of(item);
  const Seen& seen = stream.seen;
  const auto input = text::split_words(seen.text);
  // The output as if the model copied the rest of the input after its complete words: the
  // rewrites of the final words do not depend on what comes after them (final_words.h).
  auto output = text::split_words(stable);
  const size_t decoded_words = output.size();
  for (size_t k = decoded_words; k < input.size(); ++k) output.push_back(input[k]);
  // The kept rewrites stand while the model's words are those they were made of.
  if (stream.words > decoded_words ||
      (stream.words > 0 &&
       !std::equal(stream.steps[0].begin(), stream.steps[0].end(), output.begin()))) {
    stream.words = 0;
    stream.steps.clear();
  }
  const auto steps = rewritten_steps(stream, input, output, item.score);
  std::vector<std::vector<std::string_view>> alignments;
  for (const auto& step : steps) alignments.emplace_back(step.begin(), step.end());
  size_t final = final_words(input, alignments, decoded_words, [&](std::string_view w) {
    return confusion_sets_ && confusion_sets_->contains(w);
  });
  for (const auto& step : steps) final = std::min(final, step.size());
  stream.words = final;
  stream.steps.resize(steps.size());
  for (size_t s = 0; s < steps.size(); ++s)
    stream.steps[s].assign(steps[s].begin(), steps[s].begin() + static_cast<std::ptrdiff_t>(final));
  if (final == 0) return {};
  const std::string rewritten = joined_from(alignments.back(), 0);
  // Up to where the first word that is not final begins, the bytes before it included.
  std::string text;
  if (seen.frame) {
    std::vector<size_t> begins;
    text = seen.frame->restore(rewritten, seen.words, &begins);
    if (final < begins.size()) text.resize(begins[final]);
  } else {
    // Up to the next word, or to the end of the last one (a longer output goes on after it).
    const auto words = text::split_words(rewritten);
    const char* end = final < words.size() ? words[final].data()
                                           : words[final - 1].data() + words[final - 1].size();
    text = rewritten.substr(0, static_cast<size_t>(end - rewritten.data()));
  }
  // Before anything that is or may become a stop sequence.
  if (!item.params.stop.empty()) text = stable_prefix(text, item.params.stop);
  return text;
}

std::string PostprocessorStage::final_text(stage::DecodedItem& item, const std::vector<int>& ids,
                                           std::vector<std::string>& alternatives,
                                           std::vector<float>& alternative_scores,
                                           SpellSuggester::Suggestions* asked) const {
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
  output = rewrite(seen.text, std::move(output), hypotheses, scores, nullptr, {}, asked);
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
      end_stream(item);
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
    Stream* stream = find_stream(item);
    result.text = final_text(item, ids, result.alternatives, result.alternative_scores,
                             stream ? &stream->suggestions : nullptr);
    end_stream(item);
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
