"""Trains the bundled spelling corrector (a small T5 v1.1) on synthetic misspellings of text from
Debian packages, on the CPU (or a GPU with --device cuda), within a wall-clock budget, resumable from the checkpoint in --work.

    /usr/bin/python3 tools/train_speller/build_data.py --work /work/speller-work
    nice -n 19 /usr/bin/python3 tools/train_speller/train.py --work /work/speller-work --max-minutes 75

The budget counts across resumes (a rerun with the same --work continues where it stopped). Every
--save-minutes and at the end it writes WORK/checkpoint.pt and the HuggingFace-layout model
(config.json, model.safetensors, spiece.model) to --out (default WORK/export).
"""
import argparse
import collections
import json
import multiprocessing
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
import safetensors_writer  # noqa: E402
from model import T5, hf_config, load_dir, relative_position_bucket  # noqa: E402

SIZES = {
    # d_model, d_kv, heads, d_ff, encoder layers, decoder layers
    # "base" is for a GPU run (tools/train_speller/gpu_run.sh): 8.3 M parameters, 33 MB in F32
    "base": dict(d_model=256, d_kv=32, num_heads=8, d_ff=1024, num_layers=5, num_decoder_layers=2),
    "small": dict(d_model=256, d_kv=32, num_heads=8, d_ff=768, num_layers=4, num_decoder_layers=2),
    "compact": dict(d_model=192, d_kv=32, num_heads=6, d_ff=512, num_layers=3, num_decoder_layers=2),
    "tiny": dict(d_model=128, d_kv=32, num_heads=4, d_ff=384, num_layers=2, num_decoder_layers=2),
}
MAX_LEN = 64  # tokens per side, eos included


def train_tokenizer(corpus, work, vocab_size, seed, model_type="unigram"):
    """SentencePiece (unigram, or char: one piece per character) with T5's ids (pad 0, eos 1,
    unk 2, no bos), flags as seqpipe-mkmodel."""
    path = os.path.join(work, "spiece")
    if os.path.exists(path + ".model"):
        return path + ".model"
    lines = corpus.tokenizer_text(random.Random(seed), 120000)
    with open(path + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    spm.SentencePieceTrainer.train(input=path + ".txt", model_prefix=path, model_type=model_type,
                                   vocab_size=vocab_size, hard_vocab_limit=False, pad_id=0, eos_id=1, unk_id=2,
                                   bos_id=-1, character_coverage=1.0, num_threads=1, minloglevel=2)
    return path + ".model"


def encode(sp, text):
    return sp.encode(text)[:MAX_LEN - 1] + [1]


def batches(corpus, sp, rng, size, parts, mix):
    """One training batch as `parts` micro-batches of similar lengths (less padding)."""
    pairs = []
    real = mix.get("real")
    for _ in range(size):
        if real and rng.random() < mix["pair_share"]:
            words, noisy = real_pair_span(corpus, real, rng)
        else:
            words = corpus.span(rng, single_share=mix["single_share"])
            noisy = noise.corrupt(words, rng, clean_share=mix["clean_share"], word_rate=mix["word_rate"], real=real,
                                  real_rate=mix["real_rate"])
        pairs.append((encode(sp, noisy), encode(sp, " ".join(words))))
    pairs.sort(key=lambda p: (len(p[0]) + len(p[1])))
    k = -(-size // parts)
    return [collate([p[0] for p in pairs[i:i + k]], [p[1] for p in pairs[i:i + k]]) for i in range(0, size, k)]


def real_pair_span(corpus, real, rng):
    """A word of the real pairs as people misspelled it, alone or among 1-2 frequency-drawn words
    left as they are: (clean words, noisy text)."""
    words = corpus.words(rng, rng.choice((0, 0, 0, 1, 2)))
    k = rng.randrange(len(words) + 1)
    word = real.word(rng)
    noisy = words[:k] + [real.misspell(word, rng)] + words[k:]
    return words[:k] + [word] + words[k:], " ".join(noisy)


_WORKER = {}  # corpus, tokenizer and batch settings, inherited by the forked batch maker


def make_batch(step):
    w = _WORKER
    rng = random.Random(w["seed"] * 1_000_003 + step)  # a resumed run sees the same data
    return batches(w["corpus"], w["sp"], rng, w["batch"], w["micro"], w["mix"])


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
        dec[i, 1:len(t)] = torch.tensor(t[:-1])  # decoder start token 0, then the target shifted right
    return ids, mask, dec, labels


def position_prior(model):
    """Starts some encoder heads attending to a fixed neighbour (previous, next, two back, itself) and
    some decoder heads to the previous token: copying needs such heads, and learning them from
    the near-zero initial biases is slow. Only the initial values change, not the architecture."""
    with torch.no_grad():
        heads = model.c["num_heads"]
        buckets, dist = model.c["relative_attention_num_buckets"], model.c["relative_attention_max_distance"]
        enc = [-1, 1, -2, 0]  # relative offsets (key - query)
        for h, rel in enumerate(enc[:heads]):
            b = int(relative_position_bucket(torch.tensor(rel), True, buckets, dist))
            model.enc_bias.weight[b, h] += 5.0
        for h in range(min(2, heads)):
            b = int(relative_position_bucket(torch.tensor(-1 - h), False, buckets, dist))
            model.dec_bias.weight[b, h] += 5.0


def export(model, sp_path, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(model.c), f, indent=2)
        f.write("\n")
    safetensors_writer.write(os.path.join(out, "model.safetensors"), model.hf_state())
    shutil.copy(sp_path, os.path.join(out, "spiece.model"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="corpus.json (from build_data.py), checkpoints, tokenizer")
    ap.add_argument("--out", help="where the HuggingFace-layout model is written (default WORK/export)")
    ap.add_argument("--max-minutes", type=float, default=75, help="training wall-clock budget, across resumes")
    ap.add_argument("--save-minutes", type=float, default=5)
    ap.add_argument("--size", choices=sorted(SIZES), default="compact")
    ap.add_argument("--tokenizer", choices=("unigram", "char"), default="unigram", help="SentencePiece model type")
    ap.add_argument("--vocab", type=int, default=1000, help="SentencePiece pieces (at most, for char)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--micro", type=int, default=2, help="micro-batches per batch, grouped by length")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--bias-lr-mult", type=float, default=1.0, help="learning-rate factor of the position biases")
    ap.add_argument("--position-prior", action="store_true", help="see position_prior() (fresh runs only)")
    ap.add_argument("--init", help="start from this exported model directory (same size and tokenizer) with a "
                                   "fresh optimizer, instead of random weights (fresh runs only)")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--single-share", type=float, default=0.4, help="spans of 1-3 drawn words, not sentences")
    ap.add_argument("--clean-share", type=float, default=0.2, help="inputs left clean")
    ap.add_argument("--word-rate", type=float, default=0.35, help="chance a word of a noisy span is misspelled")
    ap.add_argument("--real-pairs", help="misspelled<TAB>correct file of real misspellings "
                                        "(../shared/spelling/train_pairs.tsv; never the dev or test words)")
    ap.add_argument("--pair-share", type=float, default=0.25, help="with --real-pairs: spans that are a real "
                                                                   "pair's word, alone or among 1-2 drawn words")
    ap.add_argument("--real-rate", type=float, default=0.5, help="with --real-pairs: chance a misspelled word "
                                                                 "of a span gets a real misspelling when it has one")
    ap.add_argument("--no-drawn-possessives", action="store_true", help="see data.Corpus")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads; more than 1 on a busy machine makes OpenMP wait for descheduled threads")
    ap.add_argument("--device", default="cpu", help="torch device: cpu, or cuda on a GPU machine")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast (GPU): about twice the steps; "
                                                        "weights, optimizer and export stay F32")
    ap.add_argument("--workers", type=int, default=1, help="forked processes making batches (a GPU needs several); "
                                                           "0: made in this process, between steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (smoke tests)")
    args = ap.parse_args()
    out = args.out or os.path.join(args.work, "export")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    corpus = data.Corpus(args.work, drawn_possessives=not args.no_drawn_possessives)
    sp_path = train_tokenizer(corpus, args.work, args.vocab, args.seed, args.tokenizer)
    sp = spm.SentencePieceProcessor(model_file=sp_path)
    cfg = dict(SIZES[args.size], vocab_size=sp.get_piece_size(), relative_attention_num_buckets=32,
               relative_attention_max_distance=128)
    model = T5(cfg)
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True  # TF32 matmuls; the exported weights are F32
        torch.backends.cudnn.allow_tf32 = True
    # The relative position biases start near 0 (std d_model^-0.5) and Adam moves a weight by about
    # lr per step, so position-selective heads (copying needs one) would take thousands of steps to
    # sharpen: --bias-lr-mult gives the two bias tables a larger learning rate.
    bias = [model.enc_bias.weight, model.dec_bias.weight]
    rest = [p for p in model.parameters() if all(p is not b for b in bias)]
    groups = [{"params": rest, "lr_mult": 1.0}]
    if args.bias_lr_mult != 1.0:
        groups.append({"params": bias, "lr_mult": args.bias_lr_mult, "weight_decay": 0.0})
    else:
        groups[0]["params"] = list(model.parameters())
    fresh = not os.path.exists(os.path.join(args.work, "checkpoint.pt"))
    if args.init and fresh:
        init, init_cfg = load_dir(args.init)
        if {k: init_cfg[k] for k in cfg} != cfg:
            sys.exit(f"--init {args.init} holds a different model; want {cfg}")
        model.load_state_dict(init.state_dict())
        print(f"initialised from {args.init}", flush=True)
    elif args.position_prior and fresh:
        position_prior(model)
    model.to(args.device)
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    ckpt = os.path.join(args.work, "checkpoint.pt")
    step, spent = 0, 0.0
    if os.path.exists(ckpt):
        state = torch.load(ckpt, map_location="cpu")
        if state["config"] != cfg:
            sys.exit(f"{ckpt} holds a different model ({state['config']}); use another --work")
        model.load_state_dict(state["model"])
        if len(state["opt"]["param_groups"]) == len(opt.param_groups):  # moved to the params' device
            opt.load_state_dict(state["opt"])
        else:
            print("optimizer groups changed (--bias-lr-mult): the optimizer state starts afresh", flush=True)
        step, spent = state["step"], state["spent"]
        print(f"resumed at step {step}, {spent / 60:.1f} min spent", flush=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"model {args.size}: {params / 1e6:.2f} M parameters, vocab {cfg['vocab_size']}, "
          f"budget {args.max_minutes} min", flush=True)

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "spent": time.time() - start, "config": cfg}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
        export(model, sp_path, out)

    # Forked processes make the next batches while this one trains.
    mix = dict(single_share=args.single_share, clean_share=args.clean_share, word_rate=args.word_rate,
               real=noise.RealMisspellings(args.real_pairs) if args.real_pairs else None, pair_share=args.pair_share,
               real_rate=args.real_rate)
    _WORKER.update(corpus=corpus, sp=sp, seed=args.seed, batch=args.batch, micro=args.micro, mix=mix)
    # A forked worker has been seen to hang on a lock it inherited mid-run (the CPU, torch's threads
    # busy): --workers 0 makes each batch here instead.
    pool = multiprocessing.get_context("fork").Pool(args.workers) if args.workers else None
    depth = 4 * args.workers
    ahead = collections.deque(pool.apply_async(make_batch, (s,)) for s in range(step, step + depth))
    budget = args.max_minutes * 60
    start, last_save, losses = time.time() - spent, time.time(), []
    while True:
        spent = time.time() - start
        if spent >= budget or (args.max_steps and step >= args.max_steps):
            break
        if pool:
            micro = ahead.popleft().get()
            ahead.append(pool.apply_async(make_batch, (step + depth,)))
        else:
            micro = make_batch(step)
        frac = spent / budget  # constant, then linear decay over the last 40% of the budget
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (1.0 if frac < 0.6 else max(0.02, (1.0 - frac) / 0.4))
        for g in opt.param_groups:
            g["lr"] = lr * g["lr_mult"]
        opt.zero_grad()
        tokens = sum(int((m[3] != -100).sum()) for m in micro)
        total = 0.0
        for part in micro:  # token-weighted mean over the whole batch
            ids, mask, dec, labels = (t.to(args.device, non_blocking=True) for t in part)
            with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.bf16):
                logits = model(ids, mask, dec)
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1),
                                                     ignore_index=-100, reduction="sum") / tokens
            loss.backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(total)  # a device tensor: no sync per step
        step += 1
        if step % 50 == 0:
            print(f"step {step} {spent / 60:.1f} min loss {float(sum(losses)) / len(losses):.4f} lr {lr:.2e}",
                  flush=True)
            losses = []
        if time.time() - last_save > args.save_minutes * 60:
            save()
            last_save = time.time()
    if pool:
        pool.terminate()
    save()
    print(f"done: {step} steps, {(time.time() - start) / 60:.1f} min; wrote {out}", flush=True)


if __name__ == "__main__":
    main()
