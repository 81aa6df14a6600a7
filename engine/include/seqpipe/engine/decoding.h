#pragma once
// Generation on top of the Decoder: greedy and beam search as HuggingFace generate() does them,
// run as a continuously batched set of sequences that may join and leave between steps.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "seqpipe/engine/decoder.h"
#include "seqpipe/engine/encoder.h"
#include "seqpipe/generation/finish_reason.h"
#include "seqpipe/generation/limits.h"
#include "seqpipe/generation/search_options.h"

namespace seqpipe::engine {

// The engine's results say why they ended in the serving layers' words.
using generation::FinishReason;

// A sequence's options. The search's are generation::SearchOptions' (a request's, which
// decoding_options() copies in) with their ranges in generation::range; the rest the engine's.
struct DecodingOptions {
  // Tokens generated after the start token, eos included; [1, generation::kMaxNewTokens].
  int max_new_tokens = generation::kDefaultMaxNewTokens;
  int min_new_tokens = 0;  // eos is suppressed until this many tokens were generated
  // 1: greedy; > 1: beam search, holding slot_cost(num_beams) cache slots; [1,
  // generation::kMaxBeams].
  int num_beams = 1;
  float length_penalty = 1.0f;  // beam score = sum of log-probs / length^length_penalty
  bool early_stopping = false;  // beam: stop as soon as num_beams hypotheses finished
  bool return_scores = false;   // fill GenerationResult::token_logprobs
  // Beam: hypotheses returned, best first (1..num_beams): the best in `ids`, the next ones in
  // GenerationResult::alternatives (HF num_return_sequences). Greedy: 1.
  int num_return_sequences = 1;

  // HF generate()'s logits processors (engine/logits_processors.h), for every search.
  float repetition_penalty = 1.0f;  // > 0; 1: none
  int no_repeat_ngram_size = 0;     // 0: none; [0, generation::kMaxNoRepeatNgramSize]
  // Sampling (greedy search only, num_beams == 1): draws each token from the warped softmax.
  bool do_sample = false;
  float temperature = 1.0f;              // > 0
  int top_k = generation::kDefaultTopK;  // >= 0; 0: every token
  float top_p = 1.0f;                    // (0, 1]; 1: every token
  // The sequence's own random generator's seed: the same seed, the same tokens, whatever else
  // runs in the batch. Not given: one from std::random_device.
  std::optional<uint64_t> seed = std::nullopt;
  // Greedy search and sampling: the sequence ends (without eos) as soon as its generated ids end
  // with one of these (each non-empty): a stop string's tokens. Beam search ignores them.
  std::vector<std::vector<int>> stop_ids = {};

  // Throws EngineError naming the field at fault: a value outside its generation::range (named
  // upper bounds: kMaxNewTokens, kMaxBeams), min_new_tokens above max_new_tokens,
  // num_return_sequences above num_beams, sampling with beams. `max_target_len` is the KV
  // cache's limit.
  void validate(int64_t max_target_len) const;

  bool operator==(const DecodingOptions&) const = default;
};

// The engine's options for a request's search options, field by field (early_stopping and
// stop_ids at their defaults: stop strings become ids with the tokenizer).
DecodingOptions decoding_options(const generation::SearchOptions& search);

struct GenerationResult {
  std::vector<int> ids;  // the decoder start token first, as HF generate() returns them
  // Beam: the HF sequences_score (sum of log-probs / length^length_penalty, the length without
  // a final eos). Greedy: the same formula, computed only with return_scores (else 0): it needs a
  // softmax over the vocabulary at every step.
  float score = 0.0f;
  std::vector<float> token_logprobs;  // one per id after the start token (return_scores)
  // Beam with num_return_sequences > 1: the next best finished hypotheses' ids (as `ids`), best
  // first, and each one's sequences_score (as `score`).
  std::vector<std::vector<int>> alternatives;
  std::vector<float> alternative_scores;
  // Why `ids` ended: eos, max_new_tokens, or (greedy search and sampling) a stop sequence's ids.
  FinishReason finish_reason = FinishReason::kLength;
};

// One sequence's search: greedy or beam, chosen by make_search() from the options.
class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  // Cache slots held (1 for greedy, num_beams for beam search) and the token each feeds next.
  virtual int num_slots() const = 0;
  virtual const int* slots() const = 0;
  virtual const int* next_tokens() const = 0;
  // Consumes this sequence's logits rows [num_slots, vocab] (may overwrite them).
  virtual void advance(float* logits, int64_t vocab, KvCache& cache) = 0;
  // Plain greedy search needs only its row's argmax, which the Generator picks on the logits'
  // device (ops::argmax: on a GPU only the ids cross to the host). Such a search says so here,
  // names the token it bans this step (-1: none), and takes the chosen id through advance_to.
  virtual bool needs_logits() const { return true; }
  virtual int banned_token() const { return -1; }
  virtual void advance_to(int token);
  // A beam search whose step needs only each beam's k best tokens and their log-softmax says k
  // here (0: it reads its logits); the Generator picks them on the logits' device
  // (ops::top_k_log_softmax) and passes them to advance_top_k: row b's at ids[b * stride ..],
  // best first, id -1 past the row's last.
  virtual int top_k_candidates() const { return 0; }
  virtual void advance_top_k(const int* ids, const float* logprobs, int stride, KvCache& cache);
  virtual bool done() const = 0;
  virtual GenerationResult result() const = 0;
  // Greedy search and sampling: the ids so far, the start token first (what a streamed request
  // shows). Beam search: empty (its best hypothesis is known only at the end).
  virtual std::span<const int> ids_so_far() const { return {}; }
};

struct GeneratorOptions {
  KvCacheOptions cache;
};

// Not thread-safe: one thread calls add, cancel and step (the decoder service's loop).
// Not copyable or movable (its Decoder refers to its KvCache): hold it by unique_ptr if needed.
class Generator {
 public:
  Generator(std::shared_ptr<const T5Model> model, const GeneratorOptions& options);
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // True when the free slots can hold one more sequence with these options.
  bool can_admit(const DecodingOptions& options) const;
  // Starts decoding sequence `index` of an encoder output. Validates the options and the source
  // length (EngineError); throws EngineError when there are not enough free slots.
  uint64_t add(const EncoderOutput& encoded, size_t index, const DecodingOptions& options);
  // Starts every sequence of an encoder batch (sequence i with options[i]), all or none: one
  // cross-attention GEMM per layer for the whole batch. Returns the handles in input order.
  std::vector<uint64_t> add(const EncoderOutput& encoded,
                            const std::vector<DecodingOptions>& options);
  // Drops a sequence before it finished and frees its slots; false if the handle is unknown.
  bool cancel(uint64_t handle);
  // The ids an active sequence has so far (SearchStrategy::ids_so_far); empty for an unknown
  // handle. Valid until the next step, add or cancel.
  std::span<const int> ids_so_far(uint64_t handle) const;

  struct Finished {
    uint64_t handle;
    GenerationResult result;
  };
  // One decoder step over every active sequence; finished ones are appended to `finished`
  // and their slots freed at once. The step itself allocates nothing; a finishing sequence's
  // result (its ids) is the one allocation, once per sequence. If it throws (out of memory),
  // nothing changed: no sequence was dropped.
  void step(std::vector<Finished>& finished);

  int active() const { return static_cast<int>(active_.size()); }
  int free_slots() const { return cache_.free_slots(); }
  const KvCache& cache() const { return cache_; }

 private:
  struct Active {
    uint64_t handle;
    std::unique_ptr<SearchStrategy> search;
  };
  void check_admission(const EncoderOutput& encoded, size_t index,
                       const DecodingOptions& options) const;
  // Gives the first slot's cross-attention state to the other beams and builds the search.
  Active prepare(const int* slots, const DecodingOptions& options);
  std::vector<uint64_t> add_prepared(const EncoderOutput& encoded,
                                     const std::vector<size_t>& indices,
                                     const std::vector<DecodingOptions>& options);

  std::shared_ptr<const T5Model> model_;
  KvCache cache_;
  Decoder decoder_;
  std::vector<Active> active_;  // reserved to num_slots
  // Feeds one step's logits [rows, vocab] to every active search.
  void advance_searches(const TensorView& logits);
  // Moves a host EncoderOutput to the model's device (into device_hidden_); returns `encoded`
  // itself when it is there already.
  const EncoderOutput& on_model_device(const EncoderOutput& encoded, EncoderOutput& staged);

  std::vector<int> step_slots_, step_tokens_, row_of_;
  std::vector<int> banned_, chosen_;  // per step row: ops::argmax's ban and choice
  std::vector<int> top_ids_;          // per step row: ops::top_k_log_softmax's ids ...
  std::vector<float> top_logprobs_;   // ... and log-probs, kMaxTopK a row
  Tensor host_logits_;                // only for a model off the host
  Tensor device_hidden_;              // only for a model off the host: encoder rows sent from it
  uint64_t next_handle_ = 1;
};

// Encode + decode to completion: what seqpipe-generate and the tests use.
std::vector<GenerationResult> generate(std::shared_ptr<const T5Model> model,
                                       const std::vector<std::vector<int>>& batch,
                                       const DecodingOptions& options);

}  // namespace seqpipe::engine
