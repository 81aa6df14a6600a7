#include "seqpipe/engine/encoder.h"

#include "layers.h"
#include "ops.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

// Buffers on the model's device, grown to the largest batch seen.
struct Encoder::Workspace {
  int64_t rows = 0;                                 // capacity in token rows
  int64_t max_len = 0;                              // capacity of the attention workspace in keys
  Tensor normed, qkv, attn, ff_a, ff_b, attention;  // normed, attn: the GEMMs' input type
  Tensor ff_in;       // the FFN's activation in its GEMM's input type (undefined: ff_a, f32)
  Tensor staged_ids;  // the ids on the model's device (off the CPU)
  std::vector<int> ids;
  std::vector<ops::AttentionSequence> seqs;

  void reserve(const T5Model& m, Device device, int64_t total, int64_t longest, size_t batch) {
    const T5Config& c = m.config();
    if (total > rows) {
      rows = total;
      normed = Tensor::empty({rows, c.d_model}, device, layers::gemm_input_type(m));
      ff_in = layers::gemm_input_buffer(m, rows, c.d_ff, device);
      qkv = Tensor::empty({rows, 3 * c.inner_dim()}, device);
      attn = Tensor::empty({rows, c.inner_dim()}, device, layers::gemm_input_type(m));
      ff_a = Tensor::empty({rows, c.d_ff}, device);
      ff_b = Tensor::empty({rows, c.d_ff}, device);
    }
    if (longest > max_len) {
      max_len = longest;
      attention = ops::attention_workspace(device, max_len);
    }
    seqs.resize(batch);
    ids.clear();
    ids.reserve(static_cast<size_t>(total));
  }
};

bool EncoderOutput::valid(int64_t d_model) const {
  if (offsets.empty() || offsets.front() != 0) return false;
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] <= offsets[i - 1]) return false;
  }
  if (offsets.size() == 1) return true;
  return hidden.rank() == 2 && hidden.dim(1) == d_model && offsets.back() <= hidden.dim(0);
}

void EncoderOutput::copy_sequence(size_t i, float* dst) const {
  const TensorView rows = sequence(i);
  ops::copy_to(TensorView(dst, rows.shape(), DataType::kF32, Device::kCpu), rows);
}

Encoder::Encoder(std::shared_ptr<const T5Model> model)
    : model_(std::move(model)), ws_(std::make_shared<Workspace>()) {}

EncoderOutput Encoder::encode(const std::vector<std::vector<int>>& batch) {
  const T5Model& m = *model_;
  const T5Config& c = m.config();
  const Device dev = m.device();

  EncoderOutput out;
  out.offsets.reserve(batch.size() + 1);
  out.offsets.push_back(0);
  int64_t longest = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].empty()) throw EngineError("encoder input " + std::to_string(i) + " is empty");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(batch[i].size()));
    out.offsets.push_back(out.offsets.back() + static_cast<int64_t>(batch[i].size()));
  }
  const int64_t total = out.offsets.back();
  out.hidden = Tensor::empty({std::max<int64_t>(total, 1), c.d_model}, dev).first_rows(total);
  if (total == 0) return out;

  Workspace& ws = *ws_;
  ws.reserve(m, dev, total, longest, batch.size());
  for (const auto& seq : batch) ws.ids.insert(ws.ids.end(), seq.begin(), seq.end());

  const TensorView normed = ws.normed.rows(0, total), qkv = ws.qkv.rows(0, total),
                   attn = ws.attn.rows(0, total), ff_a = ws.ff_a.rows(0, total),
                   ff_b = ws.ff_b.rows(0, total),
                   ff_in = ws.ff_in.defined() ? ws.ff_in.rows(0, total) : ff_a;
  // Each sequence attends over its own rows of the one Q/K/V GEMM's output, read in place.
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t first = out.offsets[i], len = out.length(i);
    ws.seqs[i] = ops::fused_qkv_sequence(qkv.rows(first, len), attn.rows(first, len));
  }
  ops::AttentionArgs args;
  args.seqs = ws.seqs.data();
  args.num_seqs = static_cast<int64_t>(batch.size());
  args.num_heads = c.num_heads;
  args.head_dim = c.d_kv;
  args.bias = &m.encoder_position_bias();  // computed by layer 0, shared by every layer (as HF)
  args.causal = false;
  args.workspace = ws.attention;

  const TensorView& hidden = out.hidden;
  ops::embedding(ops::stage_ids(ws.ids.data(), total, c.vocab_size, dev, ws.staged_ids),
                 m.shared_embedding(), hidden);
  for (const EncoderBlockWeights& blk : m.encoder_blocks()) {
    ops::rms_norm(hidden, blk.attention_norm, c.layer_norm_epsilon, 1.0f, normed);
    ops::linear(normed, blk.attention.qkv, qkv);
    ops::attention(args);
    ops::linear(attn, blk.attention.o, hidden, 1.0f);
    ops::rms_norm(hidden, blk.ffn_norm, c.layer_norm_epsilon, 1.0f, normed);
    layers::feed_forward_residual(m, blk.ffn, normed, ff_a, ff_b, ff_in, hidden);
  }
  ops::rms_norm(hidden, m.encoder_final_norm(), c.layer_norm_epsilon, 1.0f, hidden);
  return out;
}

}  // namespace seqpipe::engine
