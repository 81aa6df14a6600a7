#pragma once
// The postprocessor: `postprocessor.*` keys.
// One section of PipelineConfig (seqpipe/config/config.h composes them and loads them);
// a consumer that reads only this section includes only this header.

#include <string>

#include "seqpipe/config/worker_config.h"

namespace seqpipe::config {

struct PostprocessorConfig : WorkerConfig {
  PostprocessorConfig() { metrics_port = 9140; }
  // Word lists (one word a line; paths separated by ':'): an input word found there is never
  // changed by the model (postprocessor/known_words.h). Empty: off, the model's text as it is.
  std::string known_words;
  // With known_words and num_beams > 1: a known input word that at least this many of the beam
  // search's hypotheses change is changed (the model is sure of it). 0: never.
  int known_word_votes = 0;
  // With known_words and num_beams > 1: a known input word is changed when the output's score
  // (HF sequences_score) is at least this many hundredths above that of every hypothesis that
  // keeps it (one must). 0: never.
  int known_word_margin = 0;
  // With model.lower_case_words: the user's word lists (one word a line, compared lower-cased;
  // paths separated by ':'), words the speller keeps as typed whatever the model makes of them
  // (product names, jargon: "nginx"; services/text/text_frame.h). Empty: none.
  std::string user_words;
  // An Aspell dictionary (e.g. /usr/lib/aspell/en_US.multi): for input words Aspell does not
  // know, the model's word stands when Aspell suggests it too, else Aspell's first suggestion
  // (postprocessor/spell_suggester.h). Empty: off.
  std::string aspell_dictionary;
  // 1: Aspell also corrects the unknown input words the model left unchanged. 0: they stay.
  int aspell_left_words = 0;
  // The noisy channel (postprocessor/noisy_channel.h), both or neither, with aspell_dictionary:
  // "word<TAB>count" lines (the prior) and "kind<TAB>letters<TAB>count" edit counts (the error
  // model). Set: each unknown input word's correction is weighed among Aspell's suggestions, the
  // beam hypotheses' words and itself (postprocessor/spell_suggester.h). Empty: off.
  std::string word_counts;
  std::string edit_counts;
  // Real-word errors by context (postprocessor/confusion_sets.h): confusion sets and their
  // members' neighbour counts. Set: a word of a set in the output becomes the member whose
  // context score beats it by confusion_margin hundredths (nats). Empty: off.
  std::string confusion_counts;
  int confusion_margin = 500;
  bool operator==(const PostprocessorConfig&) const = default;
};

}  // namespace seqpipe::config
