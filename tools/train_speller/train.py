"""Trains the bundled spelling corrector (a small T5 v1.1) on synthetic misspellings of text from
Debian packages, on the CPU, within a time budget, resumable from the checkpoint in --work.

    /usr/bin/python3 tools/train_speller/train.py --work /var/tmp/speller --minutes 60 \
        --out models/speller-t5
"""
import argparse
import json
import os
import random
import shutil
import sys
import time

import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import noise  # noqa: E402
from model import T5, hf_config, write_safetensors  # noqa: E402

SIZES = {
    # d_model, d_kv, heads, d_ff, encoder layers, decoder layers
    "small": dict(d_model=256, d_kv=32, num_heads=8, d_ff=768, num_layers=4, num_decoder_layers=2),
    "tiny": dict(d_model=128, d_kv=32, num_heads=4, d_ff=384, num_layers=2, num_decoder_layers=2),
}
MAX_LEN = 48


def train_tokenizer(corpus, work, vocab_size, seed):
    path = os.path.join(work, "spiece")
    if os.path.exists(path + ".model"):
        return path + ".model"
    rng = random.Random(seed)
    lines = []
    for _ in range(60000):
        words = corpus.span(rng)
        lines.append(" ".join(words))
        lines.append(noise.corrupt(words, rng, clean_share=0.0))
    with open(path + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    spm.SentencePieceTrainer.train(input=path + ".txt", model_prefix=path, model_type="unigram",
                                   vocab_size=vocab_size, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   character_coverage=1.0, num_threads=2, minloglevel=2)
    return path + ".model"


def batch(corpus, sp, rng, size, heldout=False):
    src, tgt = [], []
    for _ in range(size):
        words = corpus.span(rng, heldout)
        clean = " ".join(words)
        noisy = noise.corrupt(words, rng)
        s = sp.encode(noisy)[:MAX_LEN - 1] + [1]
        t = sp.encode(clean)[:MAX_LEN - 1] + [1]
        src.append(s)
        tgt.append(t)
    return collate(src, tgt)


def collate(src, tgt):
    n, m = max(map(len, src)), max(map(len, tgt))
    ids = torch.zeros(len(src), n, dtype=torch.long)
    mask = torch.zeros(len(src), n, dtype=torch.long)
    labels = torch.full((len(src), m), -100, dtype=torch.long)
    dec = torch.zeros(len(src), m, dtype=torch.long)
    for i, (s, t) in enumerate(zip(src, tgt)):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
        labels[i, :len(t)] = torch.tensor(t)
        dec[i, 1:len(t)] = torch.tensor(t[:-1])  # start token 0, then the target shifted right
    return ids, mask, dec, labels


def export(model, sp_path, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(model.c), f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out, "model.safetensors"), model.hf_state())
    shutil.copy(sp_path, os.path.join(out, "spiece.model"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="checkpoints, tokenizer and logs (resumable)")
    ap.add_argument("--out", required=True, help="where the HuggingFace-layout model is written")
    ap.add_argument("--minutes", type=float, default=60, help="training time budget, across resumes")
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=96)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (smoke tests)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.work, exist_ok=True)

    corpus = data.Corpus(seed=args.seed)
    sp_path = train_tokenizer(corpus, args.work, args.vocab, args.seed)
    sp = spm.SentencePieceProcessor(model_file=sp_path)
    cfg = dict(SIZES[args.size], vocab_size=sp.get_piece_size(), relative_attention_num_buckets=32,
               relative_attention_max_distance=128)
    model = T5(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    ckpt = os.path.join(args.work, "checkpoint.pt")
    step, spent = 0, 0.0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, spent = state["step"], state["spent"]
        print(f"resumed at step {step}, {spent / 60:.1f} min spent", flush=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"model {args.size}: {params / 1e6:.2f} M parameters, vocab {cfg['vocab_size']}", flush=True)

    budget = args.minutes * 60
    start, last_save, losses = time.time() - spent, time.time(), []
    warmup = 400
    while True:
        spent = time.time() - start
        if spent >= budget or (args.max_steps and step >= args.max_steps):
            break
        rng = random.Random(args.seed * 1_000_003 + step)  # a resumed run sees the same data
        ids, mask, dec, labels = batch(corpus, sp, rng, args.batch)
        frac = spent / budget
        lr = args.lr * min(1.0, (step + 1) / warmup) * (1.0 if frac < 0.6 else max(0.05, (1.0 - frac) / 0.4))
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(ids, mask, dec)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        if step % 100 == 0:
            print(f"step {step} {spent / 60:.1f} min loss {sum(losses) / len(losses):.4f} lr {lr:.2e}", flush=True)
            losses = []
        if time.time() - last_save > 300:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "spent": time.time() - start, "config": cfg}, ckpt)
            last_save = time.time()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "spent": time.time() - start,
                "config": cfg}, ckpt)
    export(model, sp_path, args.out)
    print(f"done: {step} steps, {(time.time() - start) / 60:.1f} min; wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
