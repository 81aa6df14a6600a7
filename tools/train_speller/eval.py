"""Evaluates a speller checkpoint directory (config.json, model.safetensors, spiece.model), read
back through our own safetensors reader, with PyTorch greedy decoding:

  synthetic_word_accuracy  held-out sentences/words with the training noise model (every span
                           misspelled): share of target words the output gets right
  clean_words_unchanged    held-out clean spans: share of input words left unchanged
  tsv_top1                 real misspellings (misspelled<TAB>correct, lower-cased): output == correct

    /usr/bin/python3 tools/train_speller/eval.py --model models/speller-t5 --work /work/speller-work \
        --tsv ../shared/spelling/dev_words.tsv --json /work/speller-work/eval.json

Words are matched in order (difflib), so a merged or split word costs only the words involved.
"""
import argparse
import difflib
import json
import os
import random
import sys
import time

import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import noise  # noqa: E402
from model import load_dir  # noqa: E402
from train import MAX_LEN, collate  # noqa: E402


def correct(model, sp, texts, batch=64):
    """Greedy corrections of texts (on the model's device)."""
    device = model.shared.weight.device
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths batch together
    out = [None] * len(texts)
    for i in range(0, len(order), batch):
        idx = order[i:i + batch]
        src = [sp.encode(texts[k])[:MAX_LEN - 1] + [1] for k in idx]
        ids, mask, _, _ = collate(src, [[1]] * len(src))
        for k, row in zip(idx, model.greedy(ids.to(device), mask.to(device), MAX_LEN).tolist()):
            out[k] = sp.decode([t for t in row[1:row.index(1) if 1 in row else len(row)] if t > 2])
    return out


def matched(a, b):
    """Words of list a that appear, in order, in list b."""
    return sum(m.size for m in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks())


def read_tsv(path):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2 and parts[0] and parts[0] != "misspelled":
                pairs.append((parts[0].lower(), parts[1].lower()))
    return pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", required=True, help="dir with corpus.json (build_data.py)")
    ap.add_argument("--tsv", help="real misspellings: misspelled<TAB>correct")
    ap.add_argument("--synthetic", type=int, default=1000, help="held-out spans per synthetic figure")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="torch device (cuda on a GPU machine)")
    ap.add_argument("--batch", type=int, default=64, help="inputs decoded together")
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--examples", type=int, default=15, help="wrong TSV outputs to show")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    start = time.time()
    model, _ = load_dir(args.model)
    model.to(args.device)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.model, "spiece.model"))
    corpus = data.Corpus(args.work)
    rng = random.Random(args.seed)
    figures = {"model": args.model}

    spans = [corpus.span(rng, heldout=True) for _ in range(args.synthetic)]
    noisy = [noise.corrupt(s, rng, clean_share=0.0) for s in spans]
    out = correct(model, sp, noisy, args.batch)
    figures["synthetic_spans"] = len(spans)
    figures["synthetic_word_accuracy"] = sum(matched(s, o.split()) for s, o in zip(spans, out)) / sum(map(len, spans))
    figures["synthetic_span_exact"] = sum(o == " ".join(s) for s, o in zip(spans, out)) / len(spans)

    clean = [corpus.span(rng, heldout=True) for _ in range(args.synthetic)]
    out = correct(model, sp, [" ".join(c) for c in clean], args.batch)
    figures["clean_spans"] = len(clean)
    figures["clean_words_unchanged"] = sum(matched(c, o.split()) for c, o in zip(clean, out)) / sum(map(len, clean))
    figures["clean_span_unchanged"] = sum(o == " ".join(c) for c, o in zip(clean, out)) / len(clean)

    if args.tsv:
        pairs = read_tsv(args.tsv)
        out = correct(model, sp, [p[0] for p in pairs], args.batch)
        right = [o.strip() == c for o, (_, c) in zip(out, pairs)]
        figures["tsv"] = args.tsv
        figures["tsv_pairs"] = len(pairs)
        figures["tsv_top1"] = sum(right) / len(pairs)
        figures["tsv_left_unchanged"] = sum(o.strip() == m for o, (m, _) in zip(out, pairs)) / len(pairs)
        figures["tsv_wrong_examples"] = [f"{m} -> {o} (want {c})" for o, (m, c), r in zip(out, pairs, right)
                                         if not r][:args.examples]
    figures["eval_seconds"] = round(time.time() - start, 1)
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
