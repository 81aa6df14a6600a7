"""T5 v1.1 (gated-gelu, untied lm_head) in plain PyTorch, exactly as HuggingFace's T5 computes it
(RMS norm without mean or bias, no 1/sqrt(d) score scaling, relative position bias from the first
layer shared by the rest), with HuggingFace tensor names and a config.json writer."""
import math

import torch
from torch import nn


def relative_position_bucket(rel, bidirectional, num_buckets, max_distance):
    """HF T5Attention._relative_position_bucket, rel = key - query."""
    buckets = 0
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).to(torch.long) * num_buckets
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, rel, large)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        inner = c["num_heads"] * c["d_kv"]
        self.h, self.dk = c["num_heads"], c["d_kv"]
        self.q = nn.Linear(c["d_model"], inner, bias=False)
        self.k = nn.Linear(c["d_model"], inner, bias=False)
        self.v = nn.Linear(c["d_model"], inner, bias=False)
        self.o = nn.Linear(inner, c["d_model"], bias=False)

    def forward(self, x, kv, bias):
        b, n, _ = x.shape
        m = kv.shape[1]
        q = self.q(x).view(b, n, self.h, self.dk).transpose(1, 2)
        k = self.k(kv).view(b, m, self.h, self.dk).transpose(1, 2)
        v = self.v(kv).view(b, m, self.h, self.dk).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) + bias  # no 1/sqrt(d_kv): T5 folds it into the init
        out = torch.softmax(scores.float(), dim=-1).type_as(scores) @ v
        return self.o(out.transpose(1, 2).reshape(b, n, self.h * self.dk))


class FeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wi_0 = nn.Linear(c["d_model"], c["d_ff"], bias=False)
        self.wi_1 = nn.Linear(c["d_model"], c["d_ff"], bias=False)
        self.wo = nn.Linear(c["d_ff"], c["d_model"], bias=False)

    def forward(self, x):
        return self.wo(gelu_new(self.wi_0(x)) * self.wi_1(x))


class EncoderBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.sa_norm, self.sa = RMSNorm(c["d_model"]), Attention(c)
        self.ff_norm, self.ff = RMSNorm(c["d_model"]), FeedForward(c)

    def forward(self, x, bias):
        h = self.sa_norm(x)
        x = x + self.sa(h, h, bias)
        return x + self.ff(self.ff_norm(x))


class DecoderBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.sa_norm, self.sa = RMSNorm(c["d_model"]), Attention(c)
        self.ca_norm, self.ca = RMSNorm(c["d_model"]), Attention(c)
        self.ff_norm, self.ff = RMSNorm(c["d_model"]), FeedForward(c)

    def forward(self, x, enc, self_bias, cross_bias):
        h = self.sa_norm(x)
        x = x + self.sa(h, h, self_bias)
        x = x + self.ca(self.ca_norm(x), enc, cross_bias)
        return x + self.ff(self.ff_norm(x))


class T5(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.shared = nn.Embedding(c["vocab_size"], c["d_model"])
        self.enc_bias = nn.Embedding(c["relative_attention_num_buckets"], c["num_heads"])
        self.dec_bias = nn.Embedding(c["relative_attention_num_buckets"], c["num_heads"])
        self.encoder = nn.ModuleList(EncoderBlock(c) for _ in range(c["num_layers"]))
        self.decoder = nn.ModuleList(DecoderBlock(c) for _ in range(c["num_decoder_layers"]))
        self.enc_norm, self.dec_norm = RMSNorm(c["d_model"]), RMSNorm(c["d_model"])
        self.lm_head = nn.Linear(c["d_model"], c["vocab_size"], bias=False)
        self._init()

    def _init(self):  # HF T5PreTrainedModel._init_weights with initializer_factor 1
        d, dk, h, ff = self.c["d_model"], self.c["d_kv"], self.c["num_heads"], self.c["d_ff"]
        nn.init.normal_(self.shared.weight, std=1.0)
        nn.init.normal_(self.lm_head.weight, std=d ** -0.5)
        for emb in (self.enc_bias, self.dec_bias):
            nn.init.normal_(emb.weight, std=d ** -0.5)
        for m in self.modules():
            if isinstance(m, Attention):
                nn.init.normal_(m.q.weight, std=(d * dk) ** -0.5)
                nn.init.normal_(m.k.weight, std=d ** -0.5)
                nn.init.normal_(m.v.weight, std=d ** -0.5)
                nn.init.normal_(m.o.weight, std=(h * dk) ** -0.5)
            elif isinstance(m, FeedForward):
                nn.init.normal_(m.wi_0.weight, std=d ** -0.5)
                nn.init.normal_(m.wi_1.weight, std=d ** -0.5)
                nn.init.normal_(m.wo.weight, std=ff ** -0.5)

    def _bias(self, emb, q_len, k_len, bidirectional):
        ctx = torch.arange(q_len, device=emb.weight.device)[:, None]
        mem = torch.arange(k_len, device=emb.weight.device)[None, :]
        buckets = relative_position_bucket(mem - ctx, bidirectional, self.c["relative_attention_num_buckets"],
                                           self.c["relative_attention_max_distance"])
        return emb(buckets).permute(2, 0, 1).unsqueeze(0)  # [1, heads, q, k]

    def encode(self, ids, mask):
        x = self.shared(ids)
        pad = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        bias = self._bias(self.enc_bias, ids.shape[1], ids.shape[1], True) + pad
        for blk in self.encoder:
            x = blk(x, bias)
        return self.enc_norm(x)

    def decode(self, dec_ids, enc, mask):
        n = dec_ids.shape[1]
        x = self.shared(dec_ids)
        causal = torch.triu(torch.full((n, n), torch.finfo(torch.float32).min, device=dec_ids.device), diagonal=1)
        self_bias = self._bias(self.dec_bias, n, n, False) + causal
        cross_bias = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for blk in self.decoder:
            x = blk(x, enc, self_bias, cross_bias)
        return self.lm_head(self.dec_norm(x))  # untied: no d_model^-0.5 scaling

    def forward(self, ids, mask, dec_ids):
        return self.decode(dec_ids, self.encode(ids, mask), mask)

    @torch.no_grad()
    def greedy(self, ids, mask, max_new_tokens, eos=1):
        """HF generate(num_beams=1) without a cache: start token 0, stop at eos."""
        enc = self.encode(ids, mask)
        out = torch.zeros((ids.shape[0], 1), dtype=torch.long, device=ids.device)
        done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
        for _ in range(max_new_tokens):
            nxt = self.decode(out, enc, mask)[:, -1].argmax(-1)
            nxt = torch.where(done, torch.zeros_like(nxt), nxt)  # pad after eos, as HF
            out = torch.cat([out, nxt[:, None]], 1)
            done |= nxt == eos
            if done.all():
                break
        return out

    def hf_state(self):
        """Tensors under HuggingFace T5ForConditionalGeneration names (detached copies)."""
        return {k: v.detach().cpu().float().contiguous() for k, v in self.hf_state_params().items()}

    def hf_state_params(self):
        """The live parameters under HuggingFace T5ForConditionalGeneration names."""
        t = {"shared.weight": self.shared.weight, "lm_head.weight": self.lm_head.weight,
             "encoder.final_layer_norm.weight": self.enc_norm.weight,
             "decoder.final_layer_norm.weight": self.dec_norm.weight,
             "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": self.enc_bias.weight,
             "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": self.dec_bias.weight}

        def attn(prefix, a):
            for n in "qkvo":
                t[f"{prefix}.{n}.weight"] = getattr(a, n).weight

        def ffn(prefix, f):
            for n in ("wi_0", "wi_1", "wo"):
                t[f"{prefix}.{n}.weight"] = getattr(f, n).weight

        for i, b in enumerate(self.encoder):
            p = f"encoder.block.{i}.layer"
            t[f"{p}.0.layer_norm.weight"] = b.sa_norm.weight
            attn(f"{p}.0.SelfAttention", b.sa)
            t[f"{p}.1.layer_norm.weight"] = b.ff_norm.weight
            ffn(f"{p}.1.DenseReluDense", b.ff)
        for i, b in enumerate(self.decoder):
            p = f"decoder.block.{i}.layer"
            t[f"{p}.0.layer_norm.weight"] = b.sa_norm.weight
            attn(f"{p}.0.SelfAttention", b.sa)
            t[f"{p}.1.layer_norm.weight"] = b.ca_norm.weight
            attn(f"{p}.1.EncDecAttention", b.ca)
            t[f"{p}.2.layer_norm.weight"] = b.ff_norm.weight
            ffn(f"{p}.2.DenseReluDense", b.ff)
        return t


def hf_config(c):
    return {
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "is_encoder_decoder": True,
        "d_model": c["d_model"], "d_kv": c["d_kv"], "d_ff": c["d_ff"], "num_heads": c["num_heads"],
        "num_layers": c["num_layers"], "num_decoder_layers": c["num_decoder_layers"],
        "vocab_size": c["vocab_size"], "relative_attention_num_buckets": c["relative_attention_num_buckets"],
        "relative_attention_max_distance": c["relative_attention_max_distance"],
        "feed_forward_proj": "gated-gelu", "dense_act_fn": "gelu_new", "is_gated_act": True,
        "tie_word_embeddings": False, "layer_norm_epsilon": 1e-6, "dropout_rate": 0.0,
        "initializer_factor": 1.0, "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1,
        "use_cache": True, "torch_dtype": "float32", "transformers_version": "4.30.0",
    }


def load_dir(model_dir):
    """(T5, config dict) from a HuggingFace-layout directory written by train.py."""
    import json
    import os

    import safetensors_writer

    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    model = T5({k: c[k] for k in ("d_model", "d_kv", "num_heads", "d_ff", "num_layers", "num_decoder_layers",
                                  "vocab_size", "relative_attention_num_buckets", "relative_attention_max_distance")})
    tensors = safetensors_writer.read(os.path.join(model_dir, "model.safetensors"))
    live = model.hf_state_params()
    if set(tensors) != set(live):
        raise ValueError(f"{model_dir}: tensor names differ: {sorted(set(tensors) ^ set(live))[:5]}")
    with torch.no_grad():
        for name, p in live.items():
            p.copy_(tensors[name])
    model.eval()
    return model, c
