#include "seqpipe/engine/encoder.h"

#include "layers.h"
#include "ops.h"
#include "seqpipe/engine/error.h"

namespace seqpipe::engine {

struct Encoder::Workspace {
  int64_t rows = 0;     // capacity in token rows
  int64_t max_len = 0;  // capacity of the attention scratch
  Tensor normed, q, k, v, attn, ff_a, ff_b, scratch;
  std::vector<int> ids;
  std::vector<ops::AttentionSequence> seqs;

  void reserve(const T5Config& c, int64_t total, int64_t longest, size_t batch) {
    if (total > rows) {
      rows = total;
      normed = Tensor::empty({rows, c.d_model});
      q = Tensor::empty({rows, c.inner_dim()});
      k = Tensor::empty({rows, c.inner_dim()});
      v = Tensor::empty({rows, c.inner_dim()});
      attn = Tensor::empty({rows, c.inner_dim()});
      ff_a = Tensor::empty({rows, c.d_ff});
      ff_b = Tensor::empty({rows, c.d_ff});
    }
    if (longest > max_len) {
      max_len = longest;
      scratch = Tensor::empty({static_cast<int64_t>(ops::max_threads()) * max_len});
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
  out.hidden = Tensor::empty({std::max<int64_t>(total, 1), c.d_model}).first_rows(total);
  if (total == 0) return out;

  Workspace& ws = *ws_;
  ws.reserve(c, total, longest, batch.size());
  for (const auto& seq : batch) ws.ids.insert(ws.ids.end(), seq.begin(), seq.end());

  const int64_t inner = c.inner_dim();
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t first = out.offsets[i];
    ws.seqs[i] = {ws.q.row(first), out.length(i),     0, ws.k.row(first), ws.v.row(first),
                  out.length(i),   ws.attn.row(first)};
  }
  ops::AttentionArgs args;
  args.seqs = ws.seqs.data();
  args.num_seqs = static_cast<int64_t>(batch.size());
  args.num_heads = c.num_heads;
  args.head_dim = c.d_kv;
  args.q_stride = args.kv_stride = args.out_stride = inner;
  args.bias = &m.encoder_position_bias();  // computed by layer 0, shared by every layer (as HF)
  args.causal = false;
  args.scratch = ws.scratch.data();
  args.scratch_size = ws.max_len;

  float* hidden = out.hidden.data();
  ops::embedding(dev, ws.ids.data(), total, m.shared_embedding(), hidden);
  for (const EncoderBlockWeights& blk : m.encoder_blocks()) {
    ops::rms_norm(dev, hidden, total, blk.attention_norm, c.layer_norm_epsilon, 1.0f,
                  ws.normed.data());
    ops::linear(dev, ws.normed.data(), total, blk.attention.q, ws.q.data());
    ops::linear(dev, ws.normed.data(), total, blk.attention.k, ws.k.data());
    ops::linear(dev, ws.normed.data(), total, blk.attention.v, ws.v.data());
    ops::attention(dev, args);
    ops::linear(dev, ws.attn.data(), total, blk.attention.o, hidden, 1.0f);
    ops::rms_norm(dev, hidden, total, blk.ffn_norm, c.layer_norm_epsilon, 1.0f, ws.normed.data());
    layers::feed_forward_residual(m, blk.ffn, ws.normed.data(), total, ws.ff_a.data(),
                                  ws.ff_b.data(), hidden);
  }
  ops::rms_norm(dev, hidden, total, m.encoder_final_norm(), c.layer_norm_epsilon, 1.0f, hidden);
  return out;
}

}  // namespace seqpipe::engine
