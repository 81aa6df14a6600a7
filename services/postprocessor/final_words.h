#pragma once
// Streams of a model whose postprocessor rewrites words after decoding (known words, Aspell, the
// confusion sets, the text frame): a partial holds only the words that are final, those the
// decoder has moved past (a later word has begun) and whose rewrite no later token can change,
// so that the partials add up to exactly the text a request without `stream` gets.
//
// Each rewrite aligns the input's words with a word sequence (the model's output, then each
// step's correction of it) and resolves the gaps between aligned words: a gap with as many words
// on both sides word by word, any other as a whole. The alignment (text::align_words) matches
// equal words as it meets them, so the words the output repeats from the input's start are
// settled as they are decoded; after a changed word, a later output could still make the gap an
// insertion, a split or a merge, or move the alignment to a later repeat of a word, so a gap
// whose words occur nowhere else (in the input or the output) is settled by a decoded word the
// output repeats that occurs once in the input and in the output, and any other gap stops it.
// A word of a confusion set also waits for the two words after it (its context). The
// postprocessor computes the alignments as if the model copied the rest of the input (its usual
// continuation). This is what the greedy outputs show (the speller's stream test, 400 texts),
// not a proof: a model that reorders words could still break it, and then the gateway warns
// that the partials are not a prefix of the text.
#include <cstddef>
#include <functional>
#include <string_view>
#include <vector>

namespace seqpipe::postprocessor {

// How many of the input's first words are final: up to the last word that each of the
// `alignments` (the word sequences the rewrites aligned with `input`) settles among its first
// `decoded_words` (the output's complete words) as above, before a gap that is not one to one,
// and up to the first word of which `needs_context` says so (of it or a word in its place) that
// has fewer than two decoded words after it.
size_t final_words(const std::vector<std::string_view>& input,
                   const std::vector<std::vector<std::string_view>>& alignments,
                   size_t decoded_words,
                   const std::function<bool(std::string_view)>& needs_context);

}  // namespace seqpipe::postprocessor
