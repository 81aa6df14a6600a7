// The searches one sequence runs, greedy and beam (HF transformers' greedy and beam_search),
// over the logits the Generator's step computed; make_search picks one from the options.
#include "search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <span>

#include "cpu/kernels.h"  // logits are host memory: the search runs on the CPU
#include "seqpipe/engine/error.h"
#include "seqpipe/engine/logits_processors.h"
#include "seqpipe/engine/profiler.h"

namespace seqpipe::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float log_sum_exp(const float* row, int64_t n) {
  float max_v = kNegInf;
  for (int64_t i = 0; i < n; ++i) max_v = row[i] > max_v ? row[i] : max_v;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - max_v);
  return max_v + std::log(sum);
}

// The processors every search applies (HF's order), on the row of one sequence or beam.
// `gathered` holds at least history.size() floats.
void apply_processors(std::span<float> row, std::span<const int> history, const DecodingOptions& o,
                      int eos, std::span<float> gathered) {
  if (o.repetition_penalty != 1.0f)
    logits::repetition_penalty(row, history, o.repetition_penalty, gathered);
  if (o.no_repeat_ngram_size > 0) logits::no_repeat_ngram(row, history, o.no_repeat_ngram_size);
  if (static_cast<int>(history.size()) - 1 < o.min_new_tokens)
    row[static_cast<size_t>(eos)] = kNegInf;  // MinNewTokensLengthLogitsProcessor
}

uint64_t seed_of(const DecodingOptions& o) {
  if (o.seed) return *o.seed;
  std::random_device device;
  return (uint64_t{device()} << 32) | device();
}

// Greedy search and sampling, as HF greedy_search and sample: the processed logits' argmax, or
// a draw from the warped softmax, until eos or max length.
class GreedySearch final : public SearchStrategy {
 public:
  GreedySearch(int slot, const DecodingOptions& o, const T5Config& c)
      : slot_(slot), options_(o), eos_(c.eos_token_id), next_(c.decoder_start_token_id) {
    ids_.reserve(static_cast<size_t>(o.max_new_tokens) + 1);
    ids_.push_back(c.decoder_start_token_id);
    if (o.return_scores) logprobs_.reserve(static_cast<size_t>(o.max_new_tokens));
    gathered_.resize(static_cast<size_t>(o.max_new_tokens) + 1);
    if (o.do_sample) {
      rng_.seed(seed_of(o));
      scratch_.resize(static_cast<size_t>(c.vocab_size));
      order_.resize(static_cast<size_t>(c.vocab_size));
    }
  }

  int num_slots() const override { return 1; }
  const int* slots() const override { return &slot_; }
  const int* next_tokens() const override { return &next_; }
  bool done() const override { return done_; }
  std::span<const int> ids_so_far() const override { return ids_; }

  bool needs_logits() const override {
    return options_.do_sample || options_.return_scores || options_.repetition_penalty != 1.0f ||
           options_.no_repeat_ngram_size > 0;
  }
  // MinNewTokensLengthLogitsProcessor, the one processor plain greedy search applies.
  int banned_token() const override {
    return static_cast<int>(ids_.size()) - 1 < options_.min_new_tokens ? eos_ : -1;
  }
  void advance_to(int token) override { accept(token); }

  void advance(float* logits, int64_t vocab, KvCache&) override {
    profiler::ScopedOp timer(profiler::Op::kSearch);
    const std::span<float> row(logits, static_cast<size_t>(vocab));
    apply_processors(row, ids_, options_, eos_, gathered_);
    int best = 0;
    if (options_.do_sample) {
      if (options_.temperature != 1.0f) logits::temperature(row, options_.temperature);
      if (options_.top_k > 0) logits::top_k(row, options_.top_k, 1, scratch_);
      if (options_.top_p < 1.0f) logits::top_p(row, options_.top_p, 1, order_);
      best = logits::sample(row, rng_);
    } else {
      best = static_cast<int>(cpu::argmax(logits, vocab));  // first maximum, as torch.argmax
    }
    if (options_.return_scores) logprobs_.push_back(logits::log_softmax_at(row, best));
    accept(best);
  }

  GenerationResult result() const override {
    GenerationResult r;
    r.ids = ids_;
    r.token_logprobs = logprobs_;
    // accept()'s order: eos first, then a stop sequence, else the length ran out.
    const bool eos = ids_.size() > 1 && ids_.back() == eos_;
    r.finish_reason = eos                ? FinishReason::kEos
                      : ends_with_stop() ? FinishReason::kStop
                                         : FinishReason::kLength;
    if (options_.return_scores) {
      // The beam formula: sum of log-probs / length^length_penalty, the length without a final eos.
      double sum = 0.0;
      for (float lp : logprobs_) sum += lp;
      const size_t length = ids_.size() - (ids_.back() == eos_ && ids_.size() > 1 ? 1 : 0);
      r.score =
          static_cast<float>(sum / std::pow(static_cast<double>(length), options_.length_penalty));
    }
    return r;
  }

 private:
  void accept(int token) {
    const int generated = static_cast<int>(ids_.size()) - 1;
    ids_.push_back(token);
    next_ = token;
    done_ = token == eos_ || generated + 1 >= options_.max_new_tokens || ends_with_stop();
  }

  bool ends_with_stop() const {
    const std::span<const int> generated = std::span<const int>(ids_).subspan(1);
    return std::any_of(options_.stop_ids.begin(), options_.stop_ids.end(), [&](const auto& stop) {
      return !stop.empty() && generated.size() >= stop.size() &&
             std::equal(stop.begin(), stop.end(), generated.end() - stop.size());
    });
  }

  int slot_;
  DecodingOptions options_;
  int eos_;
  int next_;
  bool done_ = false;
  std::vector<int> ids_;
  std::vector<float> logprobs_;
  // Sized once: the processors' and warpers' scratch, so a step allocates nothing.
  std::vector<float> gathered_, scratch_;
  std::vector<int> order_;
  std::mt19937_64 rng_;  // this sequence's own: its draws depend on nothing else in the batch
};

// Beam search, as HF beam_search with BeamSearchScorer (transformers 4.33): 2 * num_beams
// candidates per step, finished hypotheses kept in a num_beams-best list scored by
// sum_logprobs / length^length_penalty. Every buffer is sized in the constructor.
class BeamSearch final : public SearchStrategy {
 public:
  BeamSearch(const int* slots, const DecodingOptions& o, const T5Config& c)
      : options_(o),
        beams_(o.num_beams),
        max_len_(o.max_new_tokens + 1),
        eos_(c.eos_token_id),
        vocab_(c.vocab_size) {
    const size_t nb = static_cast<size_t>(beams_), len = static_cast<size_t>(max_len_);
    slots_.assign(slots, slots + beams_);
    next_.assign(nb, c.decoder_start_token_id);
    tokens_.assign(nb * len, 0);
    new_tokens_.assign(nb * len, 0);
    logprobs_.assign(nb * len, 0.0f);
    new_logprobs_.assign(nb * len, 0.0f);
    for (size_t b = 0; b < nb; ++b) tokens_[b * len] = c.decoder_start_token_id;
    // Only the first beam is live at the start; the others would repeat its candidates.
    beam_scores_.assign(nb, -1e9f);
    beam_scores_[0] = 0.0f;
    candidates_.resize(2 * nb);
    parents_.resize(nb);
    reorder_dst_.resize(nb);
    reorder_src_.resize(nb);
    hyps_.resize(nb + 1);
    for (Hypothesis& h : hyps_) {
      h.tokens.resize(len);
      h.logprobs.resize(len);
    }
    order_.reserve(nb + 1);
    gathered_.resize(len);
  }

  int num_slots() const override { return beams_; }
  const int* slots() const override { return slots_.data(); }
  const int* next_tokens() const override { return next_.data(); }
  bool done() const override { return done_; }

  void advance(float* logits, int64_t vocab, KvCache& cache) override {
    profiler::ScopedOp timer(profiler::Op::kSearch);
    const int cur_len = cur_len_;  // tokens per beam so far, the start token included

    // Scores of every (beam, token): log_softmax + the beam's running score; keep the top 2*nb.
    int found = 0;
    for (int b = 0; b < beams_; ++b) {
      float* row = logits + static_cast<int64_t>(b) * vocab;
      const float lse = log_sum_exp(row, vocab);
      for (int64_t t = 0; t < vocab; ++t) row[t] -= lse;
      // HF's beam search runs the processors on the log-softmax.
      const std::span<const int> history(tokens_.data() + static_cast<size_t>(b) * max_len_,
                                         static_cast<size_t>(cur_len));
      apply_processors({row, static_cast<size_t>(vocab)}, history, options_, eos_, gathered_);
      const float base = beam_scores_[static_cast<size_t>(b)];
      for (int64_t t = 0; t < vocab; ++t)
        offer(row[t] + base, row[t], static_cast<int>(t), b, found);
    }
    finish_step(cache);
  }

  // Without processors that change the log-softmax, each beam's 2 x beams best tokens hold the
  // step's 2 x beams best candidates (a beam's score is added to its whole row), and one more
  // when eos is banned (min_new_tokens), which is then left out: the Generator picks them on the
  // logits' device (ops::top_k_log_softmax) and only they cross to the host.
  int top_k_candidates() const override {
    if (options_.repetition_penalty != 1.0f || options_.no_repeat_ngram_size > 0) return 0;
    const int k = 2 * beams_ + (eos_banned() ? 1 : 0);
    return k <= vocab_ ? k : 0;
  }

  // The same candidates as advance() finds in the whole rows, offered in each beam's order (its
  // scores best first, the lower token among equals), which ties resolve alike.
  void advance_top_k(const int* ids, const float* logprobs, int stride, KvCache& cache) override {
    profiler::ScopedOp timer(profiler::Op::kSearch);
    const int k = top_k_candidates();
    const bool skip_eos = eos_banned();
    int found = 0;
    for (int b = 0; b < beams_; ++b) {
      const float base = beam_scores_[static_cast<size_t>(b)];
      for (int j = 0; j < k; ++j) {
        const int token = ids[b * stride + j];
        const float logprob = logprobs[b * stride + j];
        if (token < 0) break;  // the row had fewer tokens that are numbers
        if (skip_eos && token == eos_) continue;
        offer(logprob + base, logprob, token, b, found);
      }
    }
    finish_step(cache);
  }

 private:
  // MinNewTokensLengthLogitsProcessor's ban of eos this step.
  bool eos_banned() const { return cur_len_ - 1 < options_.min_new_tokens; }

  // Keeps the 2 x beams best candidates sorted, the earlier offered first among equals.
  void offer(float score, float logprob, int token, int beam, int& found) {
    const int k = 2 * beams_;
    if (found == k && !(score > candidates_[static_cast<size_t>(k - 1)].score)) return;
    int pos = found < k ? found++ : k - 1;
    while (pos > 0 && candidates_[static_cast<size_t>(pos - 1)].score < score) {
      candidates_[static_cast<size_t>(pos)] = candidates_[static_cast<size_t>(pos - 1)];
      --pos;
    }
    candidates_[static_cast<size_t>(pos)] = {score, logprob, token, beam};
  }

  // The step's candidates are chosen: finish hypotheses, pick the next beams, reorder the cache.
  void finish_step(KvCache& cache) {
    const int cur_len = cur_len_;
    const int k = 2 * beams_;
    // BeamSearchScorer.process: eos candidates among the first nb finish a hypothesis; the
    // first nb other candidates become the next beams.
    int next_count = 0;
    for (int rank = 0; rank < k && next_count < beams_; ++rank) {
      const Candidate& cand = candidates_[static_cast<size_t>(rank)];
      if (cand.token == eos_) {
        if (rank >= beams_) continue;
        add_hypothesis(cand.beam, cur_len, cand.score, cand.logprob);
      } else {
        parents_[static_cast<size_t>(next_count++)] = rank;
      }
    }
    done_ = done_ || is_done(candidates_[0].score, cur_len);
    if (done_) return;

    // The next beams: copy each parent's history, append the token, reorder the KV cache.
    const size_t len = static_cast<size_t>(max_len_);
    int moved = 0;
    for (int j = 0; j < beams_; ++j) {
      const Candidate& cand = candidates_[static_cast<size_t>(parents_[static_cast<size_t>(j)])];
      const size_t dst = static_cast<size_t>(j) * len, src = static_cast<size_t>(cand.beam) * len;
      std::copy_n(tokens_.begin() + static_cast<std::ptrdiff_t>(src), cur_len,
                  new_tokens_.begin() + static_cast<std::ptrdiff_t>(dst));
      std::copy_n(logprobs_.begin() + static_cast<std::ptrdiff_t>(src), cur_len,
                  new_logprobs_.begin() + static_cast<std::ptrdiff_t>(dst));
      new_tokens_[dst + static_cast<size_t>(cur_len)] = cand.token;
      new_logprobs_[dst + static_cast<size_t>(cur_len)] = cand.logprob;
      beam_scores_[static_cast<size_t>(j)] = cand.score;
      next_[static_cast<size_t>(j)] = cand.token;
      if (cand.beam != j) {
        reorder_dst_[static_cast<size_t>(moved)] = slots_[static_cast<size_t>(j)];
        reorder_src_[static_cast<size_t>(moved)] = slots_[static_cast<size_t>(cand.beam)];
        ++moved;
      }
    }
    tokens_.swap(new_tokens_);
    logprobs_.swap(new_logprobs_);
    if (moved > 0) {
      profiler::ScopedOp copy_timer(profiler::Op::kCacheUpdate);
      cache.reorder(reorder_dst_.data(), reorder_src_.data(), moved);
    }
    cur_len_ = cur_len + 1;
    if (cur_len_ >= max_len_) {  // max length: every live beam becomes a hypothesis (finalize)
      for (int b = 0; b < beams_; ++b)
        add_hypothesis_full(b, cur_len_, beam_scores_[static_cast<size_t>(b)]);
      done_ = true;
    }
  }

 public:
  GenerationResult result() const override {
    GenerationResult r;
    // sorted(beams, key=score).pop(): the highest score, the latest added among equals.
    int best = -1;
    for (int idx : order_) {
      if (best < 0 ||
          hyps_[static_cast<size_t>(idx)].score >= hyps_[static_cast<size_t>(best)].score)
        best = idx;
    }
    if (best < 0) return r;
    const Hypothesis& h = hyps_[static_cast<size_t>(best)];
    r.ids = ids_of(h);
    // A hypothesis shorter than the limit ended with eos (ids_of appends it).
    r.finish_reason = h.length < max_len_ ? FinishReason::kEos : FinishReason::kLength;
    if (options_.num_return_sequences > 1) {
      // The others by score, best first; among equals the latest added first, as for `best`.
      std::vector<int> rest;
      for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
        if (*it != best) rest.push_back(*it);
      }
      std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) {
        return hyps_[static_cast<size_t>(a)].score > hyps_[static_cast<size_t>(b)].score;
      });
      for (size_t k = 0; k < rest.size() && static_cast<int>(k) + 1 < options_.num_return_sequences;
           ++k) {
        const Hypothesis& alt = hyps_[static_cast<size_t>(rest[k])];
        r.alternatives.push_back(ids_of(alt));
        r.alternative_scores.push_back(static_cast<float>(alt.score));
      }
    }
    r.score = static_cast<float>(h.score);
    if (options_.return_scores) {
      r.token_logprobs.assign(h.logprobs.begin() + 1, h.logprobs.begin() + h.length);
      if (h.length < max_len_) r.token_logprobs.push_back(h.eos_logprob);
    }
    return r;
  }

 private:
  struct Candidate {
    float score = kNegInf;  // running sum of log-probs including this token
    float logprob = 0.0f;   // this token's log-prob
    int token = 0;
    int beam = 0;
  };
  struct Hypothesis {
    double score = 0.0;
    int length = 0;
    float eos_logprob = 0.0f;
    std::vector<int> tokens;
    std::vector<float> logprobs;
  };

  std::vector<int> ids_of(const Hypothesis& h) const {
    std::vector<int> ids(h.tokens.begin(), h.tokens.begin() + h.length);
    if (h.length < max_len_) ids.push_back(eos_);
    return ids;
  }

  // A beam that produced eos: the hypothesis is the beam's tokens so far (eos not stored, as HF).
  void add_hypothesis(int beam, int length, float sum_logprobs, float eos_logprob) {
    Hypothesis* h = insert(length, sum_logprobs);
    if (h == nullptr) return;
    copy_beam(beam, length, *h);
    h->eos_logprob = eos_logprob;
  }
  void add_hypothesis_full(int beam, int length, float sum_logprobs) {
    Hypothesis* h = insert(length, sum_logprobs);
    if (h != nullptr) copy_beam(beam, length, *h);
  }
  void copy_beam(int beam, int length, Hypothesis& h) const {
    const size_t src = static_cast<size_t>(beam) * static_cast<size_t>(max_len_);
    std::copy_n(tokens_.begin() + static_cast<std::ptrdiff_t>(src), length, h.tokens.begin());
    std::copy_n(logprobs_.begin() + static_cast<std::ptrdiff_t>(src), length, h.logprobs.begin());
    h.length = length;
  }

  // BeamHypotheses.add: returns the entry to fill, or null when the hypothesis is not kept.
  Hypothesis* insert(int length, float sum_logprobs) {
    const double score =
        static_cast<double>(sum_logprobs) /
        std::pow(static_cast<double>(length), static_cast<double>(options_.length_penalty));
    if (static_cast<int>(order_.size()) >= beams_ && !(score > worst_score_)) return nullptr;
    int free_idx = 0;
    while (std::find(order_.begin(), order_.end(), free_idx) != order_.end()) ++free_idx;
    order_.push_back(free_idx);
    hyps_[static_cast<size_t>(free_idx)].score = score;
    if (static_cast<int>(order_.size()) > beams_) {
      // Drop the worst (the first in list order among equals), as HF's sorted((score, idx)).
      size_t worst = 0, second = 1;
      for (size_t i = 0; i < order_.size(); ++i) {
        if (hyps_[static_cast<size_t>(order_[i])].score <
            hyps_[static_cast<size_t>(order_[worst])].score)
          worst = i;
      }
      second = worst == 0 ? 1 : 0;
      for (size_t i = 0; i < order_.size(); ++i) {
        if (i != worst && hyps_[static_cast<size_t>(order_[i])].score <
                              hyps_[static_cast<size_t>(order_[second])].score)
          second = i;
      }
      worst_score_ = hyps_[static_cast<size_t>(order_[second])].score;
      const bool dropped_new = order_[worst] == free_idx;
      order_.erase(order_.begin() + static_cast<std::ptrdiff_t>(worst));
      if (dropped_new) return nullptr;
    } else {
      worst_score_ = std::min(score, worst_score_);
    }
    return &hyps_[static_cast<size_t>(free_idx)];
  }

  bool is_done(float best_sum_logprobs, int cur_len) const {
    if (static_cast<int>(order_.size()) < beams_) return false;
    if (options_.early_stopping) return true;
    const double highest =
        static_cast<double>(best_sum_logprobs) /
        std::pow(static_cast<double>(cur_len), static_cast<double>(options_.length_penalty));
    return worst_score_ >= highest;
  }

  DecodingOptions options_;
  int beams_;
  int max_len_;
  int eos_;
  int64_t vocab_;
  int cur_len_ = 1;
  bool done_ = false;
  std::vector<int> slots_, next_;
  std::vector<int> tokens_, new_tokens_;        // [beams, max_len]
  std::vector<float> logprobs_, new_logprobs_;  // per-token log-probs along each beam
  std::vector<float> beam_scores_;
  std::vector<Candidate> candidates_;
  std::vector<int> parents_, reorder_dst_, reorder_src_;
  std::vector<Hypothesis> hyps_;  // num_beams + 1 entries, reused
  std::vector<int> order_;        // live hypotheses, in insertion order
  std::vector<float> gathered_;   // the repetition penalty's scratch, one beam's length
  double worst_score_ = 1e9;
};

}  // namespace

std::unique_ptr<SearchStrategy> make_search(const int* slots, const DecodingOptions& o,
                                            const T5Config& c) {
  if (o.num_beams == 1) return std::make_unique<GreedySearch>(slots[0], o, c);
  return std::make_unique<BeamSearch>(slots, o, c);
}

}  // namespace seqpipe::engine
