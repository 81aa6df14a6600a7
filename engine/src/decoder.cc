#include "seqpipe/engine/decoder.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "layers.h"
#include "ops.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

// Every buffer a step needs, sized once for the cache's slot count.
struct Decoder::Workspace {
  Tensor hidden, normed, q, k, v, attn, ff_a, ff_b, logits, scratch;
  Tensor cross_k, cross_v;  // staging for start(EncoderOutput): grows to the largest batch
  std::vector<ops::AttentionSequence> seqs;
  std::vector<int64_t> positions;
  std::vector<uint64_t> slot_stamp;  // per slot: the step that last used it (duplicate check)
  uint64_t step_count = 0;
};

Decoder::Decoder(std::shared_ptr<const T5Model> model, KvCache& cache)
    : model_(std::move(model)), cache_(cache), ws_(std::make_shared<Workspace>()) {
  const T5Config& c = model_->config();
  const int64_t n = cache.num_slots();
  Workspace& ws = *ws_;
  ws.hidden = Tensor::empty({n, c.d_model});
  ws.normed = Tensor::empty({n, c.d_model});
  ws.q = Tensor::empty({n, c.inner_dim()});
  ws.k = Tensor::empty({n, c.inner_dim()});
  ws.v = Tensor::empty({n, c.inner_dim()});
  ws.attn = Tensor::empty({n, c.inner_dim()});
  ws.ff_a = Tensor::empty({n, c.d_ff});
  ws.ff_b = Tensor::empty({n, c.d_ff});
  ws.logits = Tensor::empty({n, c.vocab_size});
  // One attention scratch row per thread (ops::attention runs sequences in parallel).
  ws.scratch =
      Tensor::empty({static_cast<int64_t>(ops::max_threads()) *
                     std::max(cache.options().max_target_len, cache.options().max_source_len)});
  ws.seqs.resize(static_cast<size_t>(n));
  ws.positions.resize(static_cast<size_t>(n));
  ws.slot_stamp.assign(static_cast<size_t>(n), 0);
}

namespace {
void check_source_length(int64_t source_len, const KvCache& cache) {
  if (source_len < 1 || source_len > cache.options().max_source_len) {
    throw EngineError("source length " + std::to_string(source_len) + " is outside [1, " +
                      std::to_string(cache.options().max_source_len) +
                      "] (KV cache max_source_len)");
  }
}
}  // namespace

void Decoder::start(const EncoderOutput& encoded, const int* slots) {
  if (!encoded.valid(model_->config().d_model))
    throw EngineError("Decoder::start: malformed EncoderOutput");
  const int64_t total = encoded.offsets.empty() ? 0 : encoded.offsets.back();
  for (size_t i = 0; i < encoded.size(); ++i) {
    check_source_length(encoded.length(i), cache_);
    if (!cache_.held(slots[i]))
      throw EngineError("Decoder::start: slot " + std::to_string(slots[i]) + " is not held");
  }
  if (total == 0) return;
  const T5Model& m = *model_;
  const int64_t inner = m.config().inner_dim();
  Workspace& ws = *ws_;
  if (!ws.cross_k.defined() || ws.cross_k.dim(0) < total) {
    ws.cross_k = Tensor::empty({total, inner});
    ws.cross_v = Tensor::empty({total, inner});
  }
  int64_t layer = 0;
  for (const DecoderBlockWeights& blk : m.decoder_blocks()) {
    ops::linear(m.device(), encoded.hidden.data(), total, blk.cross_attention.k, ws.cross_k.data());
    ops::linear(m.device(), encoded.hidden.data(), total, blk.cross_attention.v, ws.cross_v.data());
    profiler::ScopedOp timer(profiler::Op::kCacheUpdate);
    for (size_t i = 0; i < encoded.size(); ++i) {
      const size_t bytes = static_cast<size_t>(encoded.length(i) * inner) * sizeof(float);
      std::memcpy(cache_.cross_k(slots[i], layer), ws.cross_k.row(encoded.offsets[i]), bytes);
      std::memcpy(cache_.cross_v(slots[i], layer), ws.cross_v.row(encoded.offsets[i]), bytes);
    }
    ++layer;
  }
  for (size_t i = 0; i < encoded.size(); ++i) {
    cache_.set_source_length(slots[i], encoded.length(i));
    cache_.set_length(slots[i], 0);
  }
}

void Decoder::start(int slot, const float* encoder_rows, int64_t source_len) {
  check_source_length(source_len, cache_);
  if (!cache_.held(slot))
    throw EngineError("Decoder::start: slot " + std::to_string(slot) + " is not held");
  const T5Model& m = *model_;
  int64_t layer = 0;
  for (const DecoderBlockWeights& blk : m.decoder_blocks()) {
    // Cross-attention K/V depend only on the encoder output: computed once per sequence.
    ops::linear(m.device(), encoder_rows, source_len, blk.cross_attention.k,
                cache_.cross_k(slot, layer));
    ops::linear(m.device(), encoder_rows, source_len, blk.cross_attention.v,
                cache_.cross_v(slot, layer));
    ++layer;
  }
  cache_.set_source_length(slot, source_len);
  cache_.set_length(slot, 0);
}

Tensor& Decoder::step(const int* slots, const int* tokens, int n) {
  Workspace& ws = *ws_;
  if (n < 1 || n > cache_.num_slots())
    throw EngineError("Decoder::step: batch of " + std::to_string(n) + " slots");
  const T5Model& m = *model_;
  const T5Config& c = m.config();
  const Device dev = m.device();
  const int64_t inner = c.inner_dim();
  const float eps = c.layer_norm_epsilon;

  // Each slot once, held, started: a bad slot list would corrupt another sequence's cache.
  const uint64_t stamp = ++ws.step_count;
  for (int i = 0; i < n; ++i) {
    const int s = slots[i];
    if (!cache_.held(s) || cache_.source_length(s) == 0 ||
        ws.slot_stamp[static_cast<size_t>(s)] == stamp) {
      throw EngineError("Decoder::step: slot " + std::to_string(s) +
                        " is not held, not started or given twice");
    }
    ws.slot_stamp[static_cast<size_t>(s)] = stamp;
  }
  for (int i = 0; i < n; ++i) {
    const int64_t pos = cache_.length(slots[i]);
    if (pos >= cache_.options().max_target_len) {
      throw EngineError("Decoder::step: slot " + std::to_string(slots[i]) +
                        " is full (max_target_len " +
                        std::to_string(cache_.options().max_target_len) + ")");
    }
    ws.positions[static_cast<size_t>(i)] = pos;
  }

  ops::AttentionArgs self_args;
  self_args.seqs = ws.seqs.data();
  self_args.num_seqs = n;
  self_args.num_heads = c.num_heads;
  self_args.head_dim = c.d_kv;
  self_args.q_stride = self_args.kv_stride = self_args.out_stride = inner;
  self_args.bias = &m.decoder_position_bias();  // layer 0's bias, shared by every layer (as HF)
  self_args.causal = true;
  self_args.scratch = ws.scratch.data();
  self_args.scratch_size = ws.scratch.numel() / ops::max_threads();
  ops::AttentionArgs cross_args = self_args;
  cross_args.bias = nullptr;
  cross_args.causal = false;

  float* hidden = ws.hidden.data();
  ops::embedding(dev, tokens, n, m.shared_embedding(), hidden);
  int64_t layer = 0;
  for (const DecoderBlockWeights& blk : m.decoder_blocks()) {
    // Self-attention over this sequence's cached positions plus the new one.
    ops::rms_norm(dev, hidden, n, blk.self_attention_norm, eps, 1.0f, ws.normed.data());
    ops::linear(dev, ws.normed.data(), n, blk.self_attention.q, ws.q.data());
    ops::linear(dev, ws.normed.data(), n, blk.self_attention.k, ws.k.data());
    ops::linear(dev, ws.normed.data(), n, blk.self_attention.v, ws.v.data());
    {
      profiler::ScopedOp timer(profiler::Op::kCacheUpdate);
      for (int i = 0; i < n; ++i) {
        const int64_t pos = ws.positions[static_cast<size_t>(i)];
        std::memcpy(cache_.self_k(slots[i], layer) + pos * inner, ws.k.row(i),
                    static_cast<size_t>(inner) * sizeof(float));
        std::memcpy(cache_.self_v(slots[i], layer) + pos * inner, ws.v.row(i),
                    static_cast<size_t>(inner) * sizeof(float));
      }
    }
    for (int i = 0; i < n; ++i) {
      const int64_t pos = ws.positions[static_cast<size_t>(i)];
      ws.seqs[static_cast<size_t>(i)] = {ws.q.row(i),
                                         1,
                                         pos,
                                         cache_.self_k(slots[i], layer),
                                         cache_.self_v(slots[i], layer),
                                         pos + 1,
                                         ws.attn.row(i)};
    }
    ops::attention(dev, self_args);
    ops::linear(dev, ws.attn.data(), n, blk.self_attention.o, hidden, 1.0f);

    // Cross-attention over the sequence's own encoder rows (no padding, so no mask).
    ops::rms_norm(dev, hidden, n, blk.cross_attention_norm, eps, 1.0f, ws.normed.data());
    ops::linear(dev, ws.normed.data(), n, blk.cross_attention.q, ws.q.data());
    for (int i = 0; i < n; ++i) {
      ws.seqs[static_cast<size_t>(i)] = {ws.q.row(i),
                                         1,
                                         0,
                                         cache_.cross_k(slots[i], layer),
                                         cache_.cross_v(slots[i], layer),
                                         cache_.source_length(slots[i]),
                                         ws.attn.row(i)};
    }
    ops::attention(dev, cross_args);
    ops::linear(dev, ws.attn.data(), n, blk.cross_attention.o, hidden, 1.0f);

    ops::rms_norm(dev, hidden, n, blk.ffn_norm, eps, 1.0f, ws.normed.data());
    layers::feed_forward_residual(m, blk.ffn, ws.normed.data(), n, ws.ff_a.data(), ws.ff_b.data(),
                                  hidden);
    ++layer;
  }
  // Tied embeddings: HF scales the decoder output by d_model^-0.5 before the shared lm_head.
  const float scale = c.tie_word_embeddings
                          ? static_cast<float>(std::pow(static_cast<double>(c.d_model), -0.5))
                          : 1.0f;
  ops::rms_norm(dev, hidden, n, m.decoder_final_norm(), eps, scale, ws.normed.data());
  ops::linear(dev, ws.normed.data(), n, m.lm_head(), ws.logits.data(), 0.0f, profiler::Op::kLmHead);

  for (int i = 0; i < n; ++i) cache_.set_length(slots[i], ws.positions[static_cast<size_t>(i)] + 1);
  return ws.logits;  // callers read rows [0, n)
}

}  // namespace seqpipe::engine
