#include "seqpipe/engine/decoder.h"

#include <cmath>
#include <vector>

#include "layers.h"
#include "ops.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

// Every buffer a step needs, sized once for the cache's slot count, on the model's device.
struct Decoder::Workspace {
  // normed and attn in the GEMMs' input type (layers::gemm_input_type), the rest f32.
  Tensor hidden, normed, q, qkv, attn, ff_a, ff_b, logits, attention;
  Tensor ff_in;          // the FFN's activation in its GEMM's input type (undefined: ff_a, f32)
  Tensor cross_kv;       // start's every-layer K/V: grows to its largest GEMM's rows
  Tensor cross_kv_half;  // ... in a half cache's type (undefined: the cache is f32)
  Tensor staged_tokens;  // the step's tokens on the model's device (off the CPU)
  std::vector<TensorCopy> copies;  // start's cross K/V rows into the slots
  std::vector<ops::AttentionSequence> seqs;
  std::vector<int64_t> positions;
  std::vector<uint64_t> slot_stamp;  // per slot: the step that last used it (duplicate check)
  uint64_t step_count = 0;
  Device device = Device::kCpu;
  // The steps a GPU recorded on these buffers must not outlive them.
  ~Workspace() { ops::forget_recorded_steps(device, this); }
};

Decoder::Decoder(std::shared_ptr<const T5Model> model, KvCache& cache)
    : model_(std::move(model)), cache_(cache), ws_(std::make_shared<Workspace>()) {
  const T5Config& c = model_->config();
  const Device dev = model_->device();
  if (cache.device() != dev)
    throw EngineError("Decoder: the KV cache is not on the model's device");
  const DataType half = ops::kv_cache_type(dev, model_->compute_type());
  if (cache.dtype() != DataType::kF32 && cache.dtype() != half) {
    throw EngineError("Decoder: the KV cache holds " + std::string(data_type_name(cache.dtype())) +
                      "; this model's decoder reads f32" +
                      (half != DataType::kF32 ? " or " + std::string(data_type_name(half)) : ""));
  }
  const int64_t n = cache.num_slots();
  Workspace& ws = *ws_;
  ws.device = dev;
  ws.hidden = Tensor::empty({n, c.d_model}, dev);
  ws.normed = Tensor::empty({n, c.d_model}, dev, layers::gemm_input_type(*model_));
  ws.ff_in = layers::gemm_input_buffer(*model_, n, c.d_ff, dev);
  ws.q = Tensor::empty({n, c.inner_dim()}, dev);
  ws.qkv = Tensor::empty({n, 3 * c.inner_dim()}, dev);
  ws.attn = Tensor::empty({n, c.inner_dim()}, dev, layers::gemm_input_type(*model_));
  ws.ff_a = Tensor::empty({n, c.d_ff}, dev);
  ws.ff_b = Tensor::empty({n, c.d_ff}, dev);
  ws.logits = Tensor::empty({n, c.vocab_size}, dev);
  if (dev != Device::kCpu) ws.staged_tokens = Tensor::empty({n}, dev, DataType::kI32);
  ws.attention = ops::attention_workspace(
      dev, std::max(cache.options().max_target_len, cache.options().max_source_len));
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
  for (size_t i = 0; i < encoded.size(); ++i) {
    check_source_length(encoded.length(i), cache_);
    if (!cache_.held(slots[i]))
      throw EngineError("Decoder::start: slot " + std::to_string(slots[i]) + " is not held");
  }
  if (encoded.size() == 0) return;
  fill_cross(encoded.hidden, encoded.offsets.data(), encoded.size(), slots);
}

void Decoder::start(int slot, const TensorView& encoder_rows) {
  const int64_t source_len = encoder_rows.rank() == 2 ? encoder_rows.dim(0) : 0;
  check_source_length(source_len, cache_);
  if (!cache_.held(slot))
    throw EngineError("Decoder::start: slot " + std::to_string(slot) + " is not held");
  const int64_t offsets[2] = {0, source_len};
  fill_cross(encoder_rows, offsets, 1, &slot);
}

// Rows of encoder output per cross K/V GEMM: the staging holds layers x 2 x inner floats a row
// (t5-small: 24 KiB), so a large batch goes in groups of sequences (each whole) of about this
// many rows, not all at once.
constexpr int64_t kCrossRowsPerGemm = 1024;

void Decoder::fill_cross(const TensorView& encoder_rows, const int64_t* offsets, size_t count,
                         const int* slots) {
  const T5Model& m = *model_;
  const int64_t inner = m.config().inner_dim(), layers = m.config().num_decoder_layers;
  Workspace& ws = *ws_;
  for (size_t first = 0, last = 0; first < count; first = last) {
    for (last = first + 1; last < count && offsets[last + 1] - offsets[first] <= kCrossRowsPerGemm;)
      ++last;
    const int64_t rows = offsets[last] - offsets[first];
    // Cross-attention K/V depend only on the encoder output: computed once per sequence, every
    // layer's in one GEMM, whose row r holds layer l's K at 2 l inner and its V after it.
    const TensorView kv = cross_kv_rows(encoder_rows.rows(offsets[first], rows));
    profiler::ScopedOp timer(profiler::Op::kCacheUpdate);
    ws.copies.clear();
    // kv as [rows x layers x 2, inner]: (row, layer l's K) is row (row x layers + l) x 2.
    const TensorView pieces(kv.data_as<void>(), {rows * layers * 2, inner}, kv.dtype(), m.device());
    for (size_t i = first; i < last; ++i) {
      for (int64_t l = 0; l < layers; ++l) {
        const TensorView k = cache_.cross_k(slots[i], l), v = cache_.cross_v(slots[i], l);
        for (int64_t r = 0; r < offsets[i + 1] - offsets[i]; ++r) {
          const int64_t piece = ((offsets[i] - offsets[first] + r) * layers + l) * 2;
          ws.copies.push_back({k.rows(r, 1), pieces.rows(piece, 1)});
          ws.copies.push_back({v.rows(r, 1), pieces.rows(piece + 1, 1)});
        }
      }
    }
    ops::copy_all(ws.copies);
  }
  for (size_t i = 0; i < count; ++i) {
    cache_.set_source_length(slots[i], offsets[i + 1] - offsets[i]);
    cache_.set_length(slots[i], 0);
  }
}

TensorView Decoder::cross_kv_rows(const TensorView& encoder_rows) {
  const T5Model& m = *model_;
  Workspace& ws = *ws_;
  const int64_t rows = encoder_rows.dim(0), width = m.decoder_cross_kv().out;
  if (!ws.cross_kv.defined() || ws.cross_kv.dim(0) < rows)
    ws.cross_kv = Tensor::empty({rows, width}, m.device());
  const TensorView kv = ws.cross_kv.rows(0, rows);
  ops::linear(encoder_rows, m.decoder_cross_kv(), kv);
  if (cache_.dtype() == DataType::kF32) return kv;
  if (!ws.cross_kv_half.defined() || ws.cross_kv_half.dim(0) < rows)
    ws.cross_kv_half = Tensor::empty({rows, width}, m.device(), cache_.dtype());
  const TensorView half = ws.cross_kv_half.rows(0, rows);
  ops::convert(kv, half);
  return half;
}

namespace {

// Each slot once, held, started and not full: a bad slot list would corrupt another sequence's
// cache. positions[i] <- slot i's next position.
void check_step_slots(const KvCache& cache, const int* slots, int n, uint64_t stamp,
                      std::vector<uint64_t>& slot_stamp, std::vector<int64_t>& positions) {
  for (int i = 0; i < n; ++i) {
    const int s = slots[i];
    if (!cache.held(s) || cache.source_length(s) == 0 ||
        slot_stamp[static_cast<size_t>(s)] == stamp) {
      throw EngineError("Decoder::step: slot " + std::to_string(s) +
                        " is not held, not started or given twice");
    }
    slot_stamp[static_cast<size_t>(s)] = stamp;
  }
  for (int i = 0; i < n; ++i) {
    const int64_t pos = cache.length(slots[i]);
    if (pos >= cache.options().max_target_len) {
      throw EngineError("Decoder::step: slot " + std::to_string(slots[i]) +
                        " is full (max_target_len " +
                        std::to_string(cache.options().max_target_len) + ")");
    }
    positions[static_cast<size_t>(i)] = pos;
  }
}

// Slot i's query, key and value are thirds of qkv's row i. The new key and value join the
// cache inside the attention op.
void self_attention_jobs(KvCache& cache, const int* slots, int n, int64_t layer,
                         const std::vector<int64_t>& positions, const TensorView& qkv,
                         const TensorView& attn, std::vector<ops::AttentionSequence>& seqs) {
  const int64_t inner = qkv.dim(1) / 3;
  for (int i = 0; i < n; ++i) {
    const int64_t keys = positions[static_cast<size_t>(i)] + 1;
    const auto third = [&](int64_t part) {
      return TensorView(qkv.row(i) + part * inner, {1, inner}, DataType::kF32, qkv.device());
    };
    seqs[static_cast<size_t>(i)] = {third(0),
                                    keys - 1,
                                    cache.self_k(slots[i], layer).rows(0, keys),
                                    cache.self_v(slots[i], layer).rows(0, keys),
                                    attn.rows(i, 1),
                                    third(1),
                                    third(2)};
  }
}

// Cross-attention over each sequence's own encoder rows (no padding, so no mask).
void cross_attention_jobs(KvCache& cache, const int* slots, int n, int64_t layer,
                          const TensorView& q, const TensorView& attn,
                          std::vector<ops::AttentionSequence>& seqs) {
  for (int i = 0; i < n; ++i) {
    const int64_t keys = cache.source_length(slots[i]);
    seqs[static_cast<size_t>(i)] = {q.rows(i, 1), 0, cache.cross_k(slots[i], layer).rows(0, keys),
                                    cache.cross_v(slots[i], layer).rows(0, keys), attn.rows(i, 1)};
  }
}

}  // namespace

TensorView Decoder::step(const int* slots, const int* tokens, int n) {
  Workspace& ws = *ws_;
  if (n < 1 || n > cache_.num_slots())
    throw EngineError("Decoder::step: batch of " + std::to_string(n) + " slots");
  const T5Model& m = *model_;
  const T5Config& c = m.config();
  const float eps = c.layer_norm_epsilon;

  check_step_slots(cache_, slots, n, ++ws.step_count, ws.slot_stamp, ws.positions);

  ops::AttentionArgs self_args;
  self_args.seqs = ws.seqs.data();
  self_args.num_seqs = n;
  self_args.num_heads = c.num_heads;
  self_args.head_dim = c.d_kv;
  self_args.bias = &m.decoder_position_bias();  // layer 0's bias, shared by every layer (as HF)
  self_args.causal = true;
  self_args.workspace = ws.attention;
  ops::AttentionArgs cross_args = self_args;
  cross_args.bias = nullptr;
  cross_args.causal = false;

  const TensorView hidden = ws.hidden.rows(0, n), normed = ws.normed.rows(0, n),
                   q = ws.q.rows(0, n), qkv = ws.qkv.rows(0, n), attn = ws.attn.rows(0, n),
                   ff_a = ws.ff_a.rows(0, n), ff_b = ws.ff_b.rows(0, n),
                   logits = ws.logits.rows(0, n);
  // Everything below is the same ops on the same buffers for the same n (the slots, positions
  // and tokens travel in the attention jobs and the staged ids): a GPU replays it as one graph.
  ops::RecordedStep recorded(m.device(), m.options().cuda_graphs, &ws, n);
  ops::embedding(ops::stage_ids(tokens, n, c.vocab_size, m.device(), ws.staged_tokens),
                 m.shared_embedding(), hidden);
  int64_t layer = 0;
  for (const DecoderBlockWeights& blk : m.decoder_blocks()) {
    // Self-attention over this sequence's cached positions plus the new one.
    ops::rms_norm(hidden, blk.self_attention_norm, eps, 1.0f, normed);
    ops::linear(normed, blk.self_attention.qkv, qkv);
    self_attention_jobs(cache_, slots, n, layer, ws.positions, qkv, attn, ws.seqs);
    ops::decode_attention(self_args);
    ops::linear(attn, blk.self_attention.o, hidden, 1.0f);

    // Cross-attention over the sequence's own encoder rows (no padding, so no mask).
    ops::rms_norm(hidden, blk.cross_attention_norm, eps, 1.0f, normed);
    ops::linear(normed, blk.cross_attention.q, q);
    cross_attention_jobs(cache_, slots, n, layer, q, attn, ws.seqs);
    ops::decode_attention(cross_args);
    ops::linear(attn, blk.cross_attention.o, hidden, 1.0f);

    ops::rms_norm(hidden, blk.ffn_norm, eps, 1.0f, normed);
    layers::feed_forward_residual(m, blk.ffn, normed, ff_a, ff_b,
                                  ws.ff_in.defined() ? ws.ff_in.rows(0, n) : ff_a, hidden);
    ++layer;
  }
  // Tied embeddings: HF scales the decoder output by d_model^-0.5 before the shared lm_head.
  const float scale = c.tie_word_embeddings
                          ? static_cast<float>(std::pow(static_cast<double>(c.d_model), -0.5))
                          : 1.0f;
  ops::rms_norm(hidden, m.decoder_final_norm(), eps, scale, normed);
  ops::linear(normed, m.lm_head(), logits, 0.0f, profiler::Op::kLmHead);
  recorded.finish();

  for (int i = 0; i < n; ++i) cache_.set_length(slots[i], ws.positions[static_cast<size_t>(i)] + 1);
  return logits;
}

}  // namespace seqpipe::engine
