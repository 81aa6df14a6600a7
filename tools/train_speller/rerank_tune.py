"""Tunes the postprocessor's noisy-channel weights (ChannelWeights in
services/postprocessor/spell_suggester.h) on development data only: top-1 on real misspellings
(../shared/spelling/dev_words.tsv) and correct words left unchanged in clean spans of *training*
sentences (the eval's held-out sentences are not used). It mirrors SpellSuggester::choose for the
words it weighs (input words that neither the word lists nor Aspell know): the candidates are
Aspell's first 10 suggestions (libaspell, as the postprocessor), each beam hypothesis's word in the
word's place (PyTorch beam search, nbest_eval.py) and the word itself. Coordinate ascent from a
start point, then a 2-fold check (fit on one half of dev_words, measure on the other).

    /usr/bin/python3 tools/train_speller/rerank_tune.py --model models/speller-t5 \\
        --work /work/speller-work --tsv ../shared/spelling/dev_words.tsv --beams 2
"""
import argparse
import ctypes
import json
import math
import os
import random
import sys

import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
from eval import read_tsv  # noqa: E402
from model import load_dir  # noqa: E402
from nbest_eval import nbest  # noqa: E402

ABSENT = 10  # SpellSuggester::kAbsent
CANDIDATES = 10  # SpellSuggester::kCandidates
NAMES = ["aspell_rank", "hypothesis_rank", "log_count", "edit_cost", "known", "first_letter", "aspell_first",
         "last_letter"]
START = [0.5, 0.5, 0.3, 0.4, 3.0, 1.0, 0.0, 0.0]


class Aspell:
    """libaspell through ctypes, configured as SpellSuggester."""

    def __init__(self, dictionary):
        lib = ctypes.CDLL("libaspell.so.15")
        for name in ["new_aspell_config", "new_aspell_speller", "to_aspell_speller", "aspell_speller_suggest",
                     "aspell_word_list_elements"]:
            getattr(lib, name).restype = ctypes.c_void_p
        lib.aspell_string_enumeration_next.restype = ctypes.c_char_p
        config = ctypes.c_void_p(lib.new_aspell_config())
        lib.aspell_config_replace(config, b"master", dictionary.encode())
        lib.aspell_config_replace(config, b"encoding", b"utf-8")
        made = ctypes.c_void_p(lib.new_aspell_speller(config))
        if lib.aspell_error_number(made) != 0:
            sys.exit(f"aspell: cannot load {dictionary}")
        self.lib, self.speller = lib, ctypes.c_void_p(lib.to_aspell_speller(made))

    def correct(self, word):
        b = word.encode()
        return self.lib.aspell_speller_check(self.speller, b, len(b)) == 1

    def suggest(self, word, n):
        b = word.encode()
        words = ctypes.c_void_p(self.lib.aspell_speller_suggest(self.speller, b, len(b)))
        it = ctypes.c_void_p(self.lib.aspell_word_list_elements(words))
        out = []
        while len(out) < n:
            s = self.lib.aspell_string_enumeration_next(it)
            if s is None:
                break
            out.append(s.decode().lower())
        self.lib.delete_aspell_string_enumeration(it)
        return out


class Channel:
    """NoisyChannel: word_counts.tsv and edit_counts.tsv as the postprocessor reads them."""

    def __init__(self, model_dir):
        self.counts, edits = {}, {}
        for line in open(os.path.join(model_dir, "word_counts.tsv"), encoding="utf-8"):
            if line.strip() and not line.startswith("#"):
                w, n = line.rstrip("\n").split("\t")
                self.counts[w.lower()] = self.counts.get(w.lower(), 0) + int(n)
        for line in open(os.path.join(model_dir, "edit_counts.tsv"), encoding="utf-8"):
            if line.strip() and not line.startswith("#"):
                kind, letters, n = line.rstrip("\n").split("\t")
                edits[kind + letters] = edits.get(kind + letters, 0) + int(n)
        total = sum(edits.values()) + 1
        self.costs = {k: math.log(total / (n + 1)) for k, n in edits.items()}
        self.unseen = math.log(total)

    def log_count(self, w):
        return math.log(self.counts.get(w, 0) + 1)

    def cost(self, key):
        return self.costs.get(key, self.unseen)

    def edit_cost(self, word, typed):
        n, m = len(word), len(typed)
        d = [[0.0] * (m + 1) for _ in range(n + 1)]
        for i in range(1, n + 1):
            d[i][0] = d[i - 1][0] + self.cost("d" + word[i - 1])
        for j in range(1, m + 1):
            d[0][j] = d[0][j - 1] + self.cost("i" + typed[j - 1])
        for i in range(1, n + 1):
            for j in range(1, m + 1):
                a, b = word[i - 1], typed[j - 1]
                best = min(d[i - 1][j] + self.cost("d" + a), d[i][j - 1] + self.cost("i" + b),
                           d[i - 1][j - 1] + (0.0 if a == b else self.cost("s" + a + b)))
                if i > 1 and j > 1 and a == typed[j - 2] and word[i - 2] == b and a != word[i - 2]:
                    best = min(best, d[i - 2][j - 2] + self.cost("t" + word[i - 2:i]))
                d[i][j] = best
        return d[n][m]


def align(a, b):
    """text::align_words: (in_begin, in_end, out_begin, out_end, same) spans on the LCS."""
    n, m = len(a), len(b)
    lcs = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            lcs[i][j] = lcs[i + 1][j + 1] + 1 if a[i] == b[j] else max(lcs[i + 1][j], lcs[i][j + 1])
    spans, i, j, i0, j0 = [], 0, 0, 0, 0
    while i < n and j < m:
        if a[i] == b[j]:
            if i > i0 or j > j0:
                spans.append((i0, i, j0, j, False))
            spans.append((i, i + 1, j, j + 1, True))
            i += 1
            j += 1
            i0, j0 = i, j
        elif lcs[i + 1][j] >= lcs[i][j + 1]:
            i += 1
        else:
            j += 1
    if n > i0 or m > j0:
        spans.append((i0, n, j0, m, False))
    return spans


def placed_words(words, hyps):
    """placed[i][k]: hypothesis k's word(s) in place of input word i (word for word, or a lone
    input word's gap), or None."""
    placed = [[None] * len(hyps) for _ in words]
    for k, h in enumerate(hyps):
        hw = h.split()
        for i0, i1, j0, j1, _ in align(words, hw):
            if i1 - i0 == j1 - j0:
                for t in range(i1 - i0):
                    placed[i0 + t][k] = hw[j0 + t]
            elif i1 - i0 == 1 and j1 > j0:
                placed[i0][k] = " ".join(hw[j0:j1])
    return placed


def cases(text, hyps, known, aspell, channel):
    """The weighed words of one input: (input position, candidate feature rows), as choose()."""
    words = text.split()
    output = next((h for h in hyps if h and all(w in known for w in h.split())), hyps[0])
    placed = placed_words(words, hyps)
    out = []
    ow = output.split()
    for i0, i1, j0, j1, _ in align(words, ow):
        if i1 - i0 == j1 - j0:
            places = [(i0 + t, ow[j0 + t]) for t in range(i1 - i0)]
        elif i1 - i0 == 1 and j1 > j0:
            places = [(i0, " ".join(ow[j0:j1]))]
        else:
            continue
        for at, placed_word in places:
            typed = words[at]
            if typed in known or aspell.correct(typed):
                continue
            cands = {}
            for r, s in enumerate(aspell.suggest(typed, CANDIDATES)):
                cands.setdefault(s, [ABSENT, ABSENT])[0] = min(cands.get(s, [ABSENT])[0], r)
            ranked = placed[at] + [placed_word]
            for k, w in enumerate(ranked):
                if w is not None:
                    c = cands.setdefault(w, [ABSENT, ABSENT])
                    c[1] = min(c[1], k)
            cands.setdefault(typed, [ABSENT, ABSENT])
            rows = [(w, ar, hr, channel.log_count(w), channel.edit_cost(w, typed),
                     w in known or aspell.correct(w), bool(w) and w[0] == typed[0], ar == 0,
                     bool(w) and w[-1] == typed[-1]) for w, (ar, hr) in cands.items()]
            out.append((at, rows))
    return out


def pick(rows, w):
    def score(r):
        return (-w[0] * r[1] - w[1] * r[2] + w[2] * r[3] - w[3] * r[4] + w[4] * r[5] + w[5] * r[6] + w[6] * r[7]
                + w[7] * r[8])
    best = rows[0]
    for r in rows:
        if score(r) > score(best):
            best = r
    return best[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the model dir, with word_counts.tsv and edit_counts.tsv")
    ap.add_argument("--work", required=True, help="dir with corpus.json (build_data.py)")
    ap.add_argument("--tsv", required=True, help="dev misspellings: misspelled<TAB>correct")
    ap.add_argument("--beams", type=int, default=2)
    ap.add_argument("--clean", type=int, default=3000, help="clean spans of training sentences")
    ap.add_argument("--known", default="/usr/share/dict/american-english-large:/usr/share/dict/british-english-large")
    ap.add_argument("--aspell", default="/usr/lib/aspell/en_US.multi")
    ap.add_argument("--cache", help="keep the beam hypotheses in this JSON file")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clean-weight", type=float, default=5.0,
                    help="the objective: dev top-1 minus this times the share of clean words changed")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pairs = read_tsv(args.tsv)
    corpus, rng = data.Corpus(args.work), random.Random(777)
    clean = [" ".join(corpus.span(rng, heldout=False)) for _ in range(args.clean)]
    if args.cache and os.path.exists(args.cache):
        hyps = json.load(open(args.cache))
    else:
        model, _ = load_dir(args.model)
        model.eval()
        sp = spm.SentencePieceProcessor(model_file=os.path.join(args.model, "spiece.model"))
        texts = [m for m, _ in pairs] + clean
        hyps = {}
        with torch.no_grad():
            for i in range(0, len(texts), 128):
                for t, h in zip(texts[i:i + 128], nbest(model, sp, texts[i:i + 128], args.beams)):
                    hyps[t] = h
        if args.cache:
            json.dump(hyps, open(args.cache, "w"))
    known = set()
    for path in args.known.split(":"):
        known |= {line.strip().lower() for line in open(path, encoding="utf-8", errors="ignore") if line.strip()}
    aspell, channel = Aspell(args.aspell), Channel(args.model)
    dev = [(c, cases(m, hyps[m], known, aspell, channel)) for m, c in pairs]
    clean_words = sum(len(t.split()) for t in clean)
    clean_cases = [(t.split()[i], rows) for t in clean for i, rows in cases(t, hyps[t], known, aspell, channel)]

    def top1(w, items):
        # A dev word not weighed (a split, a known word) counts as the output, as served.
        return sum(len(cs) == 1 and pick(cs[0][1], w) == c for c, cs in items) / len(pairs if items is dev else items)

    def changed(w):
        return sum(pick(rows, w) != word for word, rows in clean_cases) / clean_words

    def objective(w, items):
        return top1(w, items) - args.clean_weight * changed(w)

    def ascend(w, items):
        best = objective(w, items)
        for step in (0.5, 0.2, 0.1, 0.05):
            improved = True
            while improved:
                improved = False
                for k in range(len(w)):
                    for delta in (step, -step):
                        v = list(w)
                        v[k] = round(max(0.0, v[k] + delta), 3)
                        a = objective(v, items)
                        if a > best + 1e-9:
                            best, w, improved = a, v, True
        return w

    w = ascend(START, dev)
    order = list(range(len(dev)))
    random.Random(7).shuffle(order)
    halves = [[dev[i] for i in order[0::2]], [dev[i] for i in order[1::2]]]
    fold = [ascend(w, halves[h]) for h in (0, 1)]
    figures = {"beams": args.beams, "clean_weight": args.clean_weight, "weights": dict(zip(NAMES, w)), "dev_top1": top1(w, dev),
               "dev_top1_aspell_first": sum(len(cs) == 1 and cs[0][1][0][1] == 0 and cs[0][1][0][0] == c
                                            for c, cs in dev) / len(pairs),
               "dev_top1_2fold": (top1(fold[0], halves[1]) + top1(fold[1], halves[0])) / 2,
               "clean_words": clean_words, "clean_words_weighed": len(clean_cases),
               "clean_words_changed": changed(w)}
    for k, name in enumerate(NAMES):
        v = list(w)
        v[k] = 0.0
        figures[f"dev_top1_without_{name}"] = top1(v, dev)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
