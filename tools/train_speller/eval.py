"""Evaluates a speller checkpoint directory (config.json, model.safetensors, spiece.model), read
back through our own safetensors reader, with PyTorch greedy decoding:

  synthetic_word_accuracy  held-out sentences/words with the training noise model (every span
                           misspelled): share of target words the output gets right
  clean_words_unchanged    held-out clean spans: share of input words left unchanged
  tsv_top1                 real misspellings (misspelled<TAB>correct, lower-cased): output == correct
  realword_fixed           held-out spans with one word swapped for a real word it is often
                           confused with (REAL_WORD_CONFUSIONS): share whose output has the right
                           word back; realword_other_words_unchanged: the other words' share kept
  long_*                   (--long-texts N) N texts of 6 consecutive held-out sentences, each word
                           misspelled with probability 0.1: misspelled words fixed, correct kept

    /usr/bin/python3 tools/train_speller/eval.py --model models/speller-t5 --work /work/speller-work \
        --tsv ../shared/spelling/dev_words.tsv --json /work/speller-work/eval.json

--gateway ENDPOINT measures the model as served instead: the outputs come from a running seqpipe
pipeline (its gateway's client socket), with whatever the pipeline's config adds (e.g. the
postprocessor's known-words guard). --model still names the model's directory for the figures.

    build/release/tools/seqpipe up --set runtime_dir=/tmp/sp &   # the model's seqpipe.yaml in force
    /usr/bin/python3 tools/train_speller/eval.py --model models/speller-t5 --work /work/speller-work \
        --tsv ../shared/spelling/dev_words.tsv --gateway tcp://127.0.0.1:5555

Words are matched in order (difflib), so a merged or split word costs only the words involved.
"""
import argparse
import collections
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


REAL_WORD_CONFUSIONS = data.REAL_WORD_CONFUSIONS


def real_word_errors(corpus, rng, n):
    """n (clean span, span with one word swapped, swapped position) from held-out sentences."""
    return data.real_word_errors(corpus.heldout_sentences, rng, n)


def long_texts(corpus, rng, n, sentences=6, rate=0.1):
    """n (target words, noisy text, misspelled flags): consecutive held-out sentences, each ending
    in a period, every word misspelled with probability `rate`."""
    out = []
    held = corpus.heldout_sentences
    for _ in range(n):
        at = rng.randrange(len(held) - sentences)
        words, noisy, flags = [], [], []
        for s in held[at:at + sentences]:
            for i, w in enumerate(s):
                m = noise.misspell(w, rng) if rng.random() < rate else w
                end = "." if i == len(s) - 1 else ""
                words.append(w + end)
                noisy.append(m + end)
                flags.append(m != w)
        out.append((words, " ".join(noisy), flags))
    return out


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


class Served:
    """correct() through a running pipeline: requests of `batch` texts (at most gateway.max_texts)."""

    def __init__(self, endpoint, num_beams):
        self.num_beams = num_beams
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
        from seqpipe_client import Client
        self.client = Client(endpoint, timeout_ms=60000)

    def __call__(self, texts, batch):
        out = []
        for i in range(0, len(texts), batch):
            out += self.client.generate(texts[i:i + batch], max_new_tokens=MAX_LEN, num_beams=self.num_beams)["texts"]
        return out


def report(figures, path=None):
    """Prints the figures as JSON, and writes them to `path` too when given."""
    print(json.dumps(figures, indent=2))
    if path:
        with open(path, "w") as f:
            json.dump(figures, f, indent=2)


def matched(a, b):
    """Words of list a that appear, in order, in list b."""
    return sum(m.size for m in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks())


def changed_words(spans, outputs):
    """The changes made to clean spans, "word -> output" (words the output left out: "word -> "),
    commonest first, with their counts."""
    changes = collections.Counter()
    for span, o in zip(spans, outputs):
        ow = o.split()
        for tag, a0, a1, b0, b1 in difflib.SequenceMatcher(a=span, b=ow, autojunk=False).get_opcodes():
            if tag != "equal":
                changes[" ".join(span[a0:a1]) + " -> " + " ".join(ow[b0:b1])] += 1
    return [f"{change} ({n})" for change, n in changes.most_common()]


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
    ap.add_argument("--real-word", type=int, default=1000, help="spans with a real-word error")
    ap.add_argument("--long-texts", type=int, default=0, help="long texts (6 sentences each) to correct")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="torch device (cuda on a GPU machine)")
    ap.add_argument("--batch", type=int, default=64, help="inputs decoded together")
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--examples", type=int, default=15, help="wrong TSV outputs to show")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--gateway", help="measure a running pipeline's outputs (client endpoint), not PyTorch's")
    ap.add_argument("--num-beams", type=int, default=1, help="with --gateway: the requests' num_beams")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    start = time.time()
    if args.gateway:
        served = Served(args.gateway, args.num_beams)
        run = lambda texts: served(texts, min(args.batch, 64))  # noqa: E731
    else:
        model, _ = load_dir(args.model)
        model.to(args.device)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(args.model, "spiece.model"))
        run = lambda texts: correct(model, sp, texts, args.batch)  # noqa: E731
    corpus = data.Corpus(args.work)
    rng = random.Random(args.seed)
    figures = {"model": args.model, "outputs": args.gateway or "pytorch greedy", "num_beams": args.num_beams}

    spans = [corpus.span(rng, heldout=True) for _ in range(args.synthetic)]
    noisy = [noise.corrupt(s, rng, clean_share=0.0) for s in spans]
    out = run(noisy)
    figures["synthetic_spans"] = len(spans)
    figures["synthetic_word_accuracy"] = sum(matched(s, o.split()) for s, o in zip(spans, out)) / sum(map(len, spans))
    figures["synthetic_span_exact"] = sum(o == " ".join(s) for s, o in zip(spans, out)) / len(spans)

    clean = [corpus.span(rng, heldout=True) for _ in range(args.synthetic)]
    out = run([" ".join(c) for c in clean])
    figures["clean_spans"] = len(clean)
    figures["clean_words_unchanged"] = sum(matched(c, o.split()) for c, o in zip(clean, out)) / sum(map(len, clean))
    figures["clean_span_unchanged"] = sum(o == " ".join(c) for c, o in zip(clean, out)) / len(clean)
    figures["clean_changed_examples"] = changed_words(clean, out)[:args.examples]

    errors = real_word_errors(corpus, random.Random(args.seed), args.real_word)
    out = [o.split() for o in run([" ".join(noisy) for _, noisy, _ in errors])]
    fixed = [len(o) == len(c) and o[i] == c[i] for o, (c, _, i) in zip(out, errors)]
    figures["realword_spans"] = len(errors)
    figures["realword_fixed"] = sum(fixed) / len(errors)
    figures["realword_other_words_unchanged"] = (
        (sum(matched(c, o) for o, (c, _, _) in zip(out, errors)) - sum(fixed))
        / sum(len(c) - 1 for c, _, _ in errors))
    figures["realword_span_exact"] = sum(o == c for o, (c, _, _) in zip(out, errors)) / len(errors)

    if args.long_texts:
        texts = long_texts(corpus, random.Random(args.seed + 1), args.long_texts)
        out = run([noisy for _, noisy, _ in texts])
        fixed = kept = 0
        for (words, _, flags), o in zip(texts, out):
            right = set()
            for a, _, size in difflib.SequenceMatcher(a=words, b=o.split(), autojunk=False).get_matching_blocks():
                right.update(range(a, a + size))
            fixed += sum(1 for k, f in enumerate(flags) if f and k in right)
            kept += sum(1 for k, f in enumerate(flags) if not f and k in right)
        misspelled = sum(sum(f) for _, _, f in texts)
        figures["long_texts"] = len(texts)
        figures["long_words"] = sum(len(w) for w, _, _ in texts)
        figures["long_misspelled_fixed"] = fixed / misspelled
        figures["long_correct_kept"] = kept / (figures["long_words"] - misspelled)

    if args.tsv:
        pairs = read_tsv(args.tsv)
        out = run([p[0] for p in pairs])
        right = [o.strip() == c for o, (_, c) in zip(out, pairs)]
        figures["tsv"] = args.tsv
        figures["tsv_pairs"] = len(pairs)
        figures["tsv_top1"] = sum(right) / len(pairs)
        figures["tsv_left_unchanged"] = sum(o.strip() == m for o, (m, _) in zip(out, pairs)) / len(pairs)
        figures["tsv_wrong_examples"] = [f"{m} -> {o} (want {c})" for o, (m, c), r in zip(out, pairs, right)
                                         if not r][:args.examples]
    figures["eval_seconds"] = round(time.time() - start, 1)
    report(figures, args.json)


if __name__ == "__main__":
    main()
