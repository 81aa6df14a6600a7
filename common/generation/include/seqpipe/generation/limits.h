#pragma once
// The decoding limits and the default length of a generation: the one definition that the engine
// and the serving layers (client protocol, stage messages, config, batcher, decoder) refer to
// instead of retyping. Header-only and without dependencies, below both the engine and the
// protocol, so that neither includes the other.
namespace seqpipe::generation {

// Largest num_beams a sequence may use (engine::DecodingOptions::validate).
inline constexpr int kMaxBeams = 16;
// Largest max_new_tokens: far above any T5 use; it keeps a typo from sizing a KV cache of
// gigabytes.
inline constexpr int kMaxNewTokens = 4096;
// Tokens generated (eos included) when nobody says how many: DecodingOptions' default, and the
// client protocol's default for params.max_new_tokens (docs/PROTOCOL.md; a server whose
// decoder.max_new_tokens is lower uses that instead).
inline constexpr int kDefaultMaxNewTokens = 32;

// Sampling keeps the top_k most likely tokens when nobody says how many (HF generate()'s
// default); 0 keeps them all.
inline constexpr int kDefaultTopK = 50;
// Largest no_repeat_ngram_size: a longer n-gram than a generation can hold bans nothing.
inline constexpr int kMaxNoRepeatNgramSize = kMaxNewTokens;
// Stop sequences a request may give, and the UTF-8 bytes of each (the text is cut before the
// first one found).
inline constexpr int kMaxStopSequences = 8;
inline constexpr int kMaxStopBytes = 128;

// The KV-cache slots a sequence holds while it decodes, and so the credits it costs a decoder:
// 1 for greedy search, num_beams for beam search.
constexpr int slot_cost(int num_beams) {
  return num_beams > 1 ? num_beams : 1;
}

}  // namespace seqpipe::generation
