#pragma once
// The postprocessor stage: output ids -> text (special tokens skipped, as HF decode with
// skip_special_tokens), with known input words restored when postprocessor.known_words is set,
// real-word errors fixed by their context (postprocessor.confusion_counts), put back into the
// input text (model.lower_case_words), cut before a stop sequence
// (params.stop), the other beam hypotheses too when the client asked for them
// (params.num_return_sequences), sent to the gateway that owns the request. Socket-free.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "postprocessor/confusion_sets.h"
#include "postprocessor/known_words.h"
#include "postprocessor/spell_suggester.h"
#include "seqpipe/config/pipeline_config_fwd.h"
#include "seqpipe/config/postprocessor_config.h"
#include "seqpipe/engine/tokenizer.h"
#include "seqpipe/runtime/worker.h"
#include "text/text_frame.h"

namespace seqpipe::postprocessor {

// `text` up to the first of the stop sequences in it (the earliest that starts there; all of it
// when none occurs): a stop sequence ends the output and is not part of it.
std::string_view cut_before_stop(std::string_view text, const std::vector<std::string>& stop);

// The part of a streamed sequence's text so far that no later token changes, so that each
// partial is a prefix of the next and of the final text: up to the last space before the first
// place a stop sequence occurs or may still begin (a suffix that is a prefix of a stop
// sequence). Holding back the last word keeps a word piece that the next token may extend (a
// SentencePiece piece without the leading-space mark joins the word before it), and with it any
// incomplete UTF-8 sequence: a space byte never occurs inside one.
std::string_view stable_prefix(std::string_view text, const std::vector<std::string>& stop);

// What the postprocessor stage takes from the config.
struct PostprocessorOptions {
  config::PostprocessorConfig postprocessor;  // its own section: word lists, Aspell, margins
  bool lower_case_words = false;              // model.lower_case_words
  int max_input_tokens = 0;                   // model.max_input_tokens
  // batcher.max_queue_size: the most sequences of a model version in flight (the gateway lets
  // no more into the pipeline), so the most streams worth keeping.
  int max_streams = 0;
};
// The stage's options from the pipeline config (postprocessor_options.cc: the one file of the
// stage that reads the whole config, so that a key of another stage recompiles none of it).
PostprocessorOptions postprocessor_options(const config::PipelineConfig& config);

class PostprocessorStage : public worker::WorkerStage {
 public:
  PostprocessorStage(std::shared_ptr<const engine::Tokenizer> tokenizer,
                     const PostprocessorOptions& options, metrics::StageMetrics& metrics,
                     const TimeSource& time = system_time());
  stage::MessageKind accepts() const override { return stage::MessageKind::kPostprocess; }
  int capacity() const override { return credits_; }
  // Each item costs one credit; the credits go back with the results.
  void handle(stage::StageMessage&& message, worker::WorkerOutbox& out) override;

  // How many streamed sequences keep their final words' rewrites between partials (Stream
  // below), and the most that do (PostprocessorOptions::max_streams).
  size_t streams_kept() const { return streams_.size(); }
  size_t max_streams() const { return max_streams_; }

 private:
  // What the model saw of an item's input: the text frame (model.lower_case_words) and how many
  // of its words fit, or the input as it is.
  struct Seen {
    std::optional<text::TextFrame> frame;
    std::string text;  // the words the rewrites compare the output with
    size_t words = 0;  // with a frame: how many of its words the model saw
  };
  Seen seen_input(const std::string& input) const;
  // `output` with its words rewritten (known words, Aspell, confusion sets), lower-case words one
  // space apart; `steps` (optional) gets the output and each rewrite's result, in order.
  // `confusion_left`: the words before `output` (each followed by a space) that the confusion
  // sets see as its first words' context, when `output` is the rest of a text. `asked`
  // (optional): Aspell's suggestions kept for the text (SpellSuggester::choose).
  std::string rewrite(const std::string& seen, std::string output,
                      const std::vector<std::string>& hypotheses, const std::vector<float>& scores,
                      std::vector<std::string>* steps, std::string_view confusion_left = {},
                      SpellSuggester::Suggestions* asked = nullptr) const;

  // A streamed sequence between its partials: what the model saw of its input, and each rewrite
  // step's words for its first `words` input words, which are final (final_words.h: no later
  // token changes them or their rewrites), so that the next partial rewrites only the words
  // after them, and Aspell's suggestions for its words (the input's words not yet final are
  // rewritten at every partial, and the final text once more). Freed by the sequence's final
  // item; a sequence that never gets one (expired, its decoder died) is dropped, the least
  // recently used first, once max_streams() are kept: its next partial is then rewritten whole,
  // which costs time and changes no text.
  struct Stream {
    Seen seen;
    size_t words = 0;
    std::vector<std::vector<std::string>> steps;  // as rewrite's `steps`, words [0, words) each
    SpellSuggester::Suggestions suggestions;
    uint64_t used = 0;  // stream_clock_ when last used
  };
  using StreamKey = std::tuple<std::string, uint64_t, uint32_t>;  // gateway, request, index
  // The item's stream, made (what the model saw of its input) at its first partial.
  Stream& stream_of(const stage::DecodedItem& item);
  // The item's stream if it has one (null otherwise), and its end.
  Stream* find_stream(const stage::DecodedItem& item);
  void end_stream(const stage::DecodedItem& item);
  // A streamed sequence's text so far: the words no later token changes (final_words.h where
  // the text is rewritten, else stable_prefix).
  std::string partial_text(const stage::DecodedItem& item, const std::vector<int>& ids);
  // Each rewrite step's words for `output` (the model's words, then the rest of the input as if
  // copied), those of the stream's final words kept, the rest rewritten.
  std::vector<std::vector<std::string>> rewritten_steps(Stream& stream,
                                                        const std::vector<std::string_view>& input,
                                                        const std::vector<std::string_view>& output,
                                                        float score) const;
  // The item's final text: the best output rewritten, put back into the input text, cut before
  // a stop sequence (which then sets the finish reason); its other hypotheses in `alternatives`.
  // `asked` (optional): Aspell's suggestions its stream kept.
  std::string final_text(stage::DecodedItem& item, const std::vector<int>& ids,
                         std::vector<std::string>& alternatives,
                         std::vector<float>& alternative_scores,
                         SpellSuggester::Suggestions* asked) const;
  bool rewrites_text() const {
    return lower_case_words_ || known_words_ || suggester_ || confusion_sets_;
  }

  std::shared_ptr<const engine::Tokenizer> tokenizer_;
  std::optional<KnownWords> known_words_;
  std::optional<KnownWords> user_words_;             // postprocessor.user_words: kept as typed
  std::unique_ptr<const SpellSuggester> suggester_;  // postprocessor.aspell_dictionary
  std::optional<ConfusionSets> confusion_sets_;      // postprocessor.confusion_counts
  double confusion_margin_;                          // postprocessor.confusion_margin, in nats
  bool lower_case_words_;    // model.lower_case_words: the correction goes back into the input text
  SureChange sure_change_;   // postprocessor.known_word_votes and known_word_margin
  size_t max_input_tokens_;  // where the tokenizer cut a long text's words
  metrics::StageMetrics& metrics_;
  const TimeSource& time_;  // read for deadlines and stage timings (tests pass a ManualTime)
  int credits_;
  size_t max_streams_;
  std::map<StreamKey, Stream> streams_;
  uint64_t stream_clock_ = 0;  // counts partials: Stream::used
};

}  // namespace seqpipe::postprocessor
