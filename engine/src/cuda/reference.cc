#include "cuda/reference.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/attention_math.h"
#include "cuda/math.h"
#include "cuda/out_type.h"

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
  // The kernel's job strides: a fused projection's thirds are read in place (row_stride).
  const int64_t kv_stride = seq.kv_row_stride();
  const float* q = seq.q.data() + row * seq.q_row_stride() + head * d;
  float max_score = -INFINITY;
  for (int64_t j = 0; j < keys; ++j) {
    const float* k = seq.k.data() + j * kv_stride + head * d;
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
  const int64_t out = row * seq.out.row_size() + head * d;
  const math::OutType type = out_type(seq.out.dtype());
  for (int64_t i = 0; i < d; ++i) {
    float sum = 0.0f;
    for (int64_t j = 0; j < keys; ++j)
      sum += scores[static_cast<size_t>(j)] * seq.v.data()[j * kv_stride + head * d + i];
    math::store_activation(seq.out.data_as<void>(), out + i, sum * inverse, type);
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

namespace {

// q . k as the kernel's kKeyLanes lanes sum it: lane l takes dimensions l, l + kKeyLanes, ...,
// then the lanes' sums meet in the butterfly of the shuffles (lane 0's order).
template <typename Cache>
float lanes_dot(const float* q, const Cache* k, int64_t d) {
  float lane[math::kKeyLanes] = {};
  for (int l = 0; l < math::kKeyLanes; ++l) {
    for (int64_t i = l; i < d; i += math::kKeyLanes) lane[l] += q[i] * math::cache_load(k[i]);
  }
  for (int offset = math::kKeyLanes / 2; offset > 0; offset /= 2) {
    for (int l = 0; l < offset; ++l) lane[l] += lane[l + offset];
  }
  return lane[0];
}

// One (sequence, head): the work of one block of the decode kernel, over a cache of Cache
// elements.
template <typename Cache>
void decode_head(const ops::AttentionArgs& args, const ops::AttentionSequence& seq, int64_t head,
                 int threads, std::vector<float>& scores, std::vector<float>& partials) {
  const int64_t d = args.head_dim, position = seq.q_pos, stride = seq.k.row_size();
  Cache* const k = seq.k.data_as<Cache>() + head * d;
  Cache* const v = seq.v.data_as<Cache>() + head * d;
  if (seq.new_k.defined()) {
    for (int64_t i = 0; i < d; ++i) {
      math::cache_store(k[position * stride + i], seq.new_k.data()[head * d + i]);
      math::cache_store(v[position * stride + i], seq.new_v.data()[head * d + i]);
    }
  }
  const int64_t keys = math::keys_seen(seq.k.dim(0), position, args.causal);
  const float* bias_row = args.bias == nullptr ? nullptr : args.bias->table.row(head);
  const int64_t max_distance = args.bias == nullptr ? 0 : args.bias->max_distance;
  const float* q = seq.q.data() + head * d;
  float max_score = -INFINITY;
  for (int64_t j = 0; j < keys; ++j) {
    const float dot = lanes_dot(q, k + j * stride, d);
    scores[static_cast<size_t>(j)] = math::biased_score(dot, bias_row, j, position, max_distance);
    max_score = std::fmax(max_score, scores[static_cast<size_t>(j)]);
  }
  float total = 0.0f;
  for (int64_t j = 0; j < keys; ++j) {
    scores[static_cast<size_t>(j)] =
        math::softmax_weight(scores[static_cast<size_t>(j)], max_score);
    total += scores[static_cast<size_t>(j)];
  }
  const float inverse = 1.0f / total;
  const int parts = math::value_parts(threads, d);
  partials.assign(static_cast<size_t>(parts * d), 0.0f);
  for (int p = 0; p < parts; ++p) {
    for (int64_t i = 0; i < d; ++i) {
      float sum = 0.0f;
      for (int64_t j = p; j < keys; j += parts)
        sum += scores[static_cast<size_t>(j)] * math::cache_load(v[j * stride + i]);
      partials[static_cast<size_t>(p * d + i)] = sum;
    }
  }
  const math::OutType type = out_type(seq.out.dtype());
  for (int64_t i = 0; i < d; ++i) {
    float sum = 0.0f;
    for (int p = 0; p < parts; ++p) sum += partials[static_cast<size_t>(p * d + i)];
    math::store_activation(seq.out.data_as<void>(), head * d + i, sum * inverse, type);
  }
}

}  // namespace

void decode_attention(const ops::AttentionArgs& args, int threads) {
  std::vector<float> scores, partials;
  for (int64_t s = 0; s < args.num_seqs; ++s) {
    const ops::AttentionSequence& seq = args.seqs[s];
    scores.resize(static_cast<size_t>(seq.k.dim(0)));
    for (int64_t h = 0; h < args.num_heads; ++h) {
      switch (seq.k.dtype()) {  // the kernel instance the backend launches for this cache
        case DataType::kBF16:
          decode_head<math::Bf16>(args, seq, h, threads, scores, partials);
          break;
        case DataType::kF16:
          decode_head<math::F16>(args, seq, h, threads, scores, partials);
          break;
        default:
          decode_head<float>(args, seq, h, threads, scores, partials);
      }
    }
  }
}

}  // namespace seqpipe::engine::cuda::reference
