#include "seqpipe/engine/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace seqpipe::engine::logits {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float max_of(std::span<const float> scores) {
  float m = kNegInf;
  for (float s : scores) m = s > m ? s : m;
  return m;
}
}  // namespace

void repetition_penalty(std::span<float> scores, std::span<const int> history, float penalty,
                        std::span<float> gathered) {
  // HF gathers every history token's score, penalises the gathered copies and scatters them
  // back: a repeated token is penalised once, from its original score.
  for (size_t i = 0; i < history.size(); ++i) {
    const float s = scores[static_cast<size_t>(history[i])];
    gathered[i] = s < 0 ? s * penalty : s / penalty;
  }
  for (size_t i = 0; i < history.size(); ++i) scores[static_cast<size_t>(history[i])] = gathered[i];
}

void no_repeat_ngram(std::span<float> scores, std::span<const int> history, int ngram_size) {
  const size_t n = static_cast<size_t>(ngram_size), len = history.size();
  if (n == 0 || len + 1 < n) return;
  // The last n - 1 tokens are the prefix; each earlier n-gram starting with it bans its last.
  const std::span<const int> prefix = history.subspan(len + 1 - n, n - 1);
  for (size_t start = 0; start + n <= len; ++start) {
    if (std::equal(prefix.begin(), prefix.end(), history.begin() + static_cast<long>(start)))
      scores[static_cast<size_t>(history[start + n - 1])] = kNegInf;
  }
}

void temperature(std::span<float> scores, float temperature) {
  for (float& s : scores) s /= temperature;
}

void top_k(std::span<float> scores, int top_k, int min_tokens_to_keep, std::span<float> scratch) {
  const size_t k =
      std::min(static_cast<size_t>(std::max(top_k, min_tokens_to_keep)), scores.size());
  if (k == 0 || k >= scores.size()) return;
  std::copy(scores.begin(), scores.end(), scratch.begin());
  const auto kth = scratch.begin() + static_cast<long>(k - 1);
  std::nth_element(scratch.begin(), kth, scratch.begin() + static_cast<long>(scores.size()),
                   std::greater<float>());
  const float threshold = *kth;
  for (float& s : scores) {
    if (s < threshold) s = kNegInf;
  }
}

void top_p(std::span<float> scores, float top_p, int min_tokens_to_keep, std::span<int> order) {
  const size_t vocab = scores.size();
  for (size_t i = 0; i < vocab; ++i) order[i] = static_cast<int>(i);
  // Ascending; equal scores by index, so that the result never depends on the sort.
  std::sort(order.begin(), order.begin() + static_cast<long>(vocab), [&](int a, int b) {
    const float sa = scores[static_cast<size_t>(a)], sb = scores[static_cast<size_t>(b)];
    return sa < sb || (sa == sb && a < b);
  });
  const float m = scores[static_cast<size_t>(order[vocab - 1])];
  float total = 0.0f;
  for (size_t i = 0; i < vocab; ++i) total += std::exp(scores[static_cast<size_t>(order[i])] - m);
  // The least likely tokens while their cumulative probability stays <= 1 - top_p, never the
  // min_tokens_to_keep most likely.
  const size_t removable = vocab - std::min(vocab, static_cast<size_t>(min_tokens_to_keep));
  const float limit = 1.0f - top_p;
  float cumulative = 0.0f;
  for (size_t i = 0; i < removable; ++i) {
    float& s = scores[static_cast<size_t>(order[i])];
    cumulative += std::exp(s - m) / total;
    if (cumulative > limit) break;
    s = kNegInf;
  }
}

float log_softmax_at(std::span<const float> scores, int token) {
  const float m = max_of(scores);
  double sum = 0.0;
  for (float s : scores) sum += std::exp(static_cast<double>(s - m));
  return static_cast<float>(scores[static_cast<size_t>(token)] - m - std::log(sum));
}

int sample(std::span<const float> scores, std::mt19937_64& rng) {
  const float m = max_of(scores);
  double total = 0.0;
  for (float s : scores) total += std::exp(static_cast<double>(s - m));
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;  // in [0, total)
  double cumulative = 0.0;
  int last = 0;  // the last token with a probability: what rounding past the end lands on
  for (size_t i = 0; i < scores.size(); ++i) {
    const double p = std::exp(static_cast<double>(scores[i] - m));
    if (p == 0.0) continue;
    cumulative += p;
    last = static_cast<int>(i);
    if (u < cumulative) return last;
  }
  return last;
}

}  // namespace seqpipe::engine::logits
