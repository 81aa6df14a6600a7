#include "cuda/reference.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/math.h"

namespace seqpipe::engine::cuda::reference {

void rms_norm(const float* x, int64_t m, int64_t d, const float* w, float eps, float scale,
              float* y) {
  for (int64_t r = 0; r < m; ++r) {  // a block per row
    const float* xr = x + r * d;
    float sum = 0.0f;
    for (int64_t i = 0; i < d; ++i) sum += xr[i] * xr[i];
    const float inverse = math::rms_inverse(sum, d, eps);
    for (int64_t i = 0; i < d; ++i)
      y[r * d + i] = math::rms_norm_value(xr[i], w[i], inverse, scale);
  }
}

void embedding(const int* ids, int64_t n, const float* table, int64_t d, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * d, table + static_cast<int64_t>(ids[i]) * d,
                static_cast<size_t>(d) * sizeof(float));
  }
}

void relu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = math::relu(x[i]);
}

void gated_gelu(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = math::gated_gelu(a[i], b[i]);
}

void to_bf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = math::bf16_bits(std::bit_cast<uint32_t>(x[i]));
}

namespace {

// One (sequence, head, query row): the work of one block of the attention kernel.
void attend(const ops::AttentionArgs& args, const ops::AttentionSequence& seq, int64_t head,
            int64_t row, std::vector<float>& scores) {
  const int64_t d = args.head_dim;
  const int64_t query = seq.q_pos + row;
  const int64_t keys = math::keys_seen(seq.k.dim(0), query, args.causal);
  const float* q = seq.q.row(row) + head * d;
  float max_score = -INFINITY;
  for (int64_t j = 0; j < keys; ++j) {
    const float* k = seq.k.row(j) + head * d;
    float score = 0.0f;
    for (int64_t i = 0; i < d; ++i) score += q[i] * k[i];
    if (args.bias != nullptr) {
      score += args.bias->table.row(head)[math::bias_column(j, query, args.bias->max_distance)];
    }
    scores[static_cast<size_t>(j)] = score;
    max_score = std::fmax(max_score, score);
  }
  float total = 0.0f;
  for (int64_t j = 0; j < keys; ++j) {
    scores[static_cast<size_t>(j)] =
        math::softmax_weight(scores[static_cast<size_t>(j)], max_score);
    total += scores[static_cast<size_t>(j)];
  }
  const float inverse = 1.0f / total;
  float* out = seq.out.row(row) + head * d;
  for (int64_t i = 0; i < d; ++i) {
    float sum = 0.0f;
    for (int64_t j = 0; j < keys; ++j)
      sum += scores[static_cast<size_t>(j)] * seq.v.row(j)[head * d + i];
    out[i] = sum * inverse;
  }
}

}  // namespace

void attention(const ops::AttentionArgs& args) {
  for (int64_t s = 0; s < args.num_seqs; ++s) {  // the append kernel, then the attention kernel
    const ops::AttentionSequence& seq = args.seqs[s];
    if (!seq.new_k.defined()) continue;
    const size_t bytes = static_cast<size_t>(seq.new_k.bytes());
    std::memcpy(seq.k.row(seq.q_pos), seq.new_k.data(), bytes);
    std::memcpy(seq.v.row(seq.q_pos), seq.new_v.data(), bytes);
  }
  std::vector<float> scores;
  for (int64_t s = 0; s < args.num_seqs; ++s) {
    const ops::AttentionSequence& seq = args.seqs[s];
    scores.resize(static_cast<size_t>(seq.k.dim(0)));
    for (int64_t h = 0; h < args.num_heads; ++h) {
      for (int64_t r = 0; r < seq.q.dim(0); ++r) attend(args, seq, h, r, scores);
    }
  }
}

void argmax(const float* logits, int64_t rows, int64_t vocab, const int* banned, int* ids) {
  for (int64_t r = 0; r < rows; ++r) {  // a block per row
    const float* row = logits + r * vocab;
    float best = -INFINITY;
    int64_t best_index = vocab;
    for (int64_t i = 0; i < vocab; ++i) {
      if (i == banned[r]) continue;
      if (math::argmax_prefers(row[i], i, best, best_index)) {
        best = row[i];
        best_index = i;
      }
    }
    ids[r] = static_cast<int>(best_index < vocab ? best_index : 0);
  }
}

}  // namespace seqpipe::engine::cuda::reference
