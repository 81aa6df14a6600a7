#pragma once
// The logits processors and warpers of HuggingFace generate() (transformers'
// generation/logits_process.py), as pure functions over one row of scores (the vocabulary) and
// the sequence so far (`history`: the decoder start token first, as HF's decoder input_ids).
// None allocates: the scratch spans are the caller's, sized once per sequence.
//
// The order generate() applies them, and so Generator's: repetition_penalty, no_repeat_ngram,
// min_new_tokens (processors, on the logits for greedy and sampling, on the log-softmax for beam
// search); then, when sampling, temperature, top_k, top_p (warpers), then a draw.
#include <cstdint>
#include <random>
#include <span>

namespace seqpipe::engine::logits {

// RepetitionPenaltyLogitsProcessor: the score of each token that occurs in `history` (once,
// however often it occurs) is multiplied by `penalty` when negative, else divided by it.
// `gathered` holds at least history.size() floats.
void repetition_penalty(std::span<float> scores, std::span<const int> history, float penalty,
                        std::span<float> gathered);

// NoRepeatNGramLogitsProcessor: every token that would complete an n-gram of `ngram_size` tokens
// already in `history` gets -inf. Nothing while history.size() + 1 < ngram_size.
void no_repeat_ngram(std::span<float> scores, std::span<const int> history, int ngram_size);

// TemperatureLogitsWarper: scores / temperature (temperature > 0).
void temperature(std::span<float> scores, float temperature);

// TopKLogitsWarper: scores below the k-th largest get -inf (ties with it are kept), where k is
// max(top_k, min_tokens_to_keep), at most the vocabulary. `scratch` holds scores.size() floats.
void top_k(std::span<float> scores, int top_k, int min_tokens_to_keep, std::span<float> scratch);

// TopPLogitsWarper: with the scores sorted ascending, the tokens whose cumulative softmax
// probability is <= 1 - top_p get -inf, except the min_tokens_to_keep most likely ones. `order`
// holds scores.size() ints.
void top_p(std::span<float> scores, float top_p, int min_tokens_to_keep, std::span<int> order);

// The log-probability of token `token` under softmax(scores).
float log_softmax_at(std::span<const float> scores, int token);

// A token drawn from softmax(scores) with `rng` (torch.multinomial's role): one 53-bit uniform
// draw per call, so a sequence's draws depend on its own generator and nothing else.
int sample(std::span<const float> scores, std::mt19937_64& rng);

}  // namespace seqpipe::engine::logits
