#pragma once
// Streams of a model whose postprocessor rewrites words after decoding (known words, Aspell, the
// confusion sets, the text frame): a partial holds only the words that are final, those the
// decoder has moved past (a later word has begun) and whose rewrite no later token can change,
// so that the partials add up to exactly the text a request without `stream` gets.
//
// Each rewrite aligns the input's words with a word sequence (the model's output, then each
// step's correction of it) and resolves the gaps between aligned words: a gap with as many words
// on both sides word by word, any other as a whole. So an input word's rewrite is known once
// every alignment is one to one up to it and a decoded word the output repeats from the input
// closes any gap before it (an open gap could still become an insertion, a split or a merge),
// and once its context is decoded where a confusion set decides by the two words after it. The
// postprocessor computes the alignments as if the model copied the rest of the input (its usual
// continuation).
#include <cstddef>
#include <functional>
#include <string_view>
#include <vector>

namespace seqpipe::postprocessor {

// How many of the input's first words are final: up to the last word that each of the
// `alignments` (the word sequences the rewrites aligned with `input`) repeats among its first
// `decoded_words` (the output's complete words) before a gap that is not one to one, and up to
// the first word of which `needs_context` says so (of it or a word in its place) that has fewer
// than two decoded words after it.
size_t final_words(const std::vector<std::string_view>& input,
                   const std::vector<std::vector<std::string_view>>& alignments,
                   size_t decoded_words, const std::function<bool(std::string_view)>& needs_context);

}  // namespace seqpipe::postprocessor
