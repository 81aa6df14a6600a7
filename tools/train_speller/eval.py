"""Evaluates a trained speller checkpoint directory (config.json, model.safetensors, spiece.model),
read back through our own safetensors reader, with PyTorch greedy decoding:

  - word accuracy on held-out synthetic misspellings (held-out sentences, same noise model);
  - the share of correct words left unchanged on held-out clean text;
  - top-1 accuracy on a TSV of real misspellings (misspelled<TAB>correct, header line allowed);
  - with --engine BIN: the engine (seqpipe-generate) must produce the same ids as PyTorch.

    /usr/bin/python3 tools/train_speller/eval.py --model models/speller-t5 \
        --tsv ../shared/spelling/dev_words.tsv --engine build/release/tools/seqpipe-generate --json out.json
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import time

import numpy as np
import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import noise  # noqa: E402
from model import T5  # noqa: E402
from train import collate  # noqa: E402

MAX_NEW = 48


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", name
        b, e = meta["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(blob[b:e], dtype="<f4").copy()).view(meta["shape"])
    return out


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    model = T5({k: c[k] for k in ("d_model", "d_kv", "num_heads", "d_ff", "num_layers", "num_decoder_layers",
                                  "vocab_size", "relative_attention_num_buckets", "relative_attention_max_distance")})
    tensors = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    state = model.hf_state()
    assert set(tensors) == set(state), set(tensors) ^ set(state)
    with torch.no_grad():
        for name, live in model.hf_state_params().items():
            live.copy_(tensors[name])
    model.eval()
    return model, spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "spiece.model"))


def correct(model, sp, texts, batch=64):
    """Greedy outputs: (texts, ids lists) for inputs."""
    outs, ids_out = [], []
    for i in range(0, len(texts), batch):
        chunk = texts[i:i + batch]
        src = [sp.encode(t)[:47] + [1] for t in chunk]
        ids, mask, _, _ = collate(src, [[1]] * len(src))
        gen = model.greedy(ids, mask, MAX_NEW)
        for row in gen.tolist():
            row = row[: row.index(1) + 1] if 1 in row[1:] else row
            ids_out.append(row)
            outs.append(sp.decode([t for t in row if t > 2]))
    return outs, ids_out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tsv", help="real misspellings: misspelled<TAB>correct")
    ap.add_argument("--synthetic", type=int, default=1000, help="held-out synthetic spans")
    ap.add_argument("--engine", help="seqpipe-generate: check engine ids == PyTorch ids")
    ap.add_argument("--engine-inputs", type=int, default=200)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--seed", type=int, default=12345)
    args = ap.parse_args()
    torch.set_num_threads(2)
    model, sp = load(args.model)
    corpus = data.Corpus(seed=0)
    rng = random.Random(args.seed)
    figures = {}

    spans = [corpus.span(rng, heldout=True) for _ in range(args.synthetic)]
    noisy = [noise.corrupt(s, rng, clean_share=0.0) for s in spans]
    out, _ = correct(model, sp, noisy)
    right = total = 0
    for s, o in zip(spans, out):
        o_words = o.split()
        total += len(s)
        right += sum(1 for k, w in enumerate(s) if k < len(o_words) and o_words[k] == w) if len(o_words) == len(s) else 0
    figures["synthetic_word_accuracy"] = right / total
    figures["synthetic_span_exact"] = sum(o == " ".join(s) for s, o in zip(spans, out)) / len(spans)

    clean = [" ".join(corpus.span(rng, heldout=True)) for _ in range(args.synthetic)]
    out, _ = correct(model, sp, clean)
    kept = total = 0
    for c, o in zip(clean, out):
        cw, ow = c.split(), o.split()
        total += len(cw)
        kept += sum(1 for k, w in enumerate(cw) if k < len(ow) and ow[k] == w) if len(ow) == len(cw) else 0
    figures["clean_words_unchanged"] = kept / total

    if args.tsv:
        pairs = []
        with open(args.tsv) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 2 and parts[0] != "misspelled":
                    pairs.append((parts[0].lower(), parts[1].lower()))
        out, _ = correct(model, sp, [p[0] for p in pairs])
        figures["tsv"] = args.tsv
        figures["tsv_pairs"] = len(pairs)
        figures["tsv_top1"] = sum(o.strip() == c for o, (_, c) in zip(out, pairs)) / len(pairs)

    if args.engine:
        inputs = noisy[: args.engine_inputs]
        _, torch_ids = correct(model, sp, inputs)
        same = 0
        mismatches = []
        start = time.time()
        for text, ids in zip(inputs, torch_ids):
            res = subprocess.run([args.engine, "--model", args.model, "--text", text, "--max-new-tokens", str(MAX_NEW),
                                  "--threads", "1", "--json"], capture_output=True, text=True, check=True)
            engine_ids = json.loads(res.stdout)["ids"]
            if engine_ids == ids:
                same += 1
            elif len(mismatches) < 5:
                mismatches.append({"text": text, "torch": ids, "engine": engine_ids})
        figures["engine_equal"] = same
        figures["engine_checked"] = len(inputs)
        figures["engine_mismatches"] = mismatches
        figures["engine_check_seconds"] = round(time.time() - start, 1)
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    if args.engine and figures["engine_equal"] != figures["engine_checked"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
