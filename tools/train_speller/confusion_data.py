"""Writes the postprocessor's real-word context counts next to the model (postprocessor.confusion_counts;
services/postprocessor/confusion_sets.h reads them), and tunes the margin it needs:

  confusion_counts.tsv  word<TAB>feature<TAB>count: for each word of CONFUSION_SETS, how often it
                        occurs in the corpus's TRAINING sentences (feature "*") and with each
                        neighbour context: P:prev, N:next, PN:prev|next, PP:prev2|prev, NN:next|next2
                        (a context that reaches past the sentence is not counted; one seen once is
                        left out). The sets come first: "word<TAB>set<TAB>k" for each member of set k.

A word of a set is replaced by another member when that member's naive-Bayes context score,
ln(n(c) + 1) + sum over the contexts f present of ln((n(c, f) + ALPHA) / (n(c) + ALPHA * V)) (V: the
distinct contexts of that kind), beats the word's own by the margin. A context that no member of
the set was counted with (pruned: seen once) is left out: it says nothing about which one fits.

CONFUSION_SETS includes eval.py's REAL_WORD_CONFUSIONS (the real-word eval's 28 groups) and more
commonly confused English words; realword_fixed measures only the eval's groups.

    /usr/bin/python3 tools/train_speller/confusion_data.py --work /work/speller-work --out models/speller-t5
    /usr/bin/python3 tools/train_speller/confusion_data.py --work /work/speller-work --tune

--tune counts on the training sentences but every 20th, and on those 20th sentences measures, per
margin, the share of injected real-word errors fixed and of correct words changed (the served
pipeline runs the model first; this measures the context check alone).
"""
import argparse
import collections
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402

# The real-word eval's groups (data.py), then more commonly confused words.
EVAL_CONFUSIONS = data.REAL_WORD_CONFUSIONS
MORE_CONFUSIONS = [
    ("bare", "bear"), ("brake", "break"), ("buy", "by"), ("cite", "site", "sight"),
    ("complement", "compliment"), ("council", "counsel"), ("dairy", "diary"), ("die", "dye"),
    ("fair", "fare"), ("farther", "further"), ("flour", "flower"), ("hour", "our"),
    ("lessen", "lesson"), ("meat", "meet"), ("plain", "plane"), ("precede", "proceed"),
    ("rain", "reign", "rein"), ("role", "roll"), ("scene", "seen"), ("sea", "see"),
    ("stationary", "stationery"), ("tail", "tale"), ("threw", "through"), ("waist", "waste"),
    ("wait", "weight"), ("which", "witch"), ("cloths", "clothes"), ("dose", "does"),
    ("board", "bored"), ("course", "coarse"), ("aloud", "allowed"), ("chose", "choose"),
    ("dear", "deer"), ("knight", "night"), ("knot", "not"), ("mail", "male"), ("made", "maid"),
    ("pain", "pane"), ("pair", "pear"), ("poor", "pour"), ("road", "rode"), ("sale", "sail"),
    ("son", "sun"), ("steal", "steel"), ("wood", "would"), ("later", "latter"), ("loose", "loss"),
    ("personal", "personnel"), ("an", "and"), ("began", "begun"), ("lightning", "lightening"),
    ("emigrate", "immigrate"), ("eminent", "imminent"), ("adverse", "averse"), ("altar", "alter"),
    ("capital", "capitol"), ("cord", "chord"), ("discreet", "discrete"), ("elicit", "illicit"),
    ("horse", "hoarse"), ("idle", "idol"), ("heard", "herd"), ("rite", "right", "write"),
    ("suite", "sweet"), ("vain", "vein", "vane"), ("way", "weigh"), ("ware", "wear", "where"),
    ("wander", "wonder"), ("thorough", "through", "threw"), ("two", "to", "too"),
]
ALPHA = 0.5
KINDS = ("P", "N", "PN", "PP", "NN")


def confusion_sets():
    """Every word's set: the union of the groups it is in (a word may be in several)."""
    members = collections.defaultdict(set)
    for group in EVAL_CONFUSIONS + MORE_CONFUSIONS:
        for w in group:
            members[w].update(group)
    return members


def contexts(words, i):
    """The contexts of words[i] that lie inside `words`, as feature strings."""
    out = []
    if i >= 1:
        out.append("P:" + words[i - 1])
    if i + 1 < len(words):
        out.append("N:" + words[i + 1])
    if i >= 1 and i + 1 < len(words):
        out.append("PN:" + words[i - 1] + "|" + words[i + 1])
    if i >= 2:
        out.append("PP:" + words[i - 2] + "|" + words[i - 1])
    if i + 2 < len(words):
        out.append("NN:" + words[i + 1] + "|" + words[i + 2])
    return out


def count(sentences, members):
    counts = collections.defaultdict(collections.Counter)
    for s in sentences:
        for i, w in enumerate(s):
            if w in members:
                counts[w]["*"] += 1
                counts[w].update(contexts(s, i))
    return counts


class Scorer:
    def __init__(self, counts, members):
        self.counts, self.members = counts, members
        distinct = collections.Counter()
        seen = set()
        for c in counts.values():
            for f in c:
                if f != "*" and f not in seen:
                    seen.add(f)
                    distinct[f.split(":", 1)[0]] += 1
        self.distinct = distinct

    def score(self, candidate, features):
        c = self.counts.get(candidate, collections.Counter())
        n = c["*"]
        s = math.log(n + 1)
        for f in features:
            s += math.log((c[f] + ALPHA) / (n + ALPHA * max(1, self.distinct[f.split(":", 1)[0]])))
        return s

    def correct(self, words, margin):
        """words with each confusion word replaced by the member that beats it by the margin."""
        out = list(words)
        for i, w in enumerate(words):
            if w not in self.members:
                continue
            candidates = sorted(self.members[w])
            # A context no member was seen in says nothing about which one fits.
            features = [f for f in contexts(words, i)
                        if any(self.counts.get(c, {}).get(f, 0) for c in candidates)]
            own = self.score(w, features)
            best, best_score = w, own + margin
            for c in candidates:
                s = self.score(c, features)
                if c != w and s > best_score:
                    best, best_score = c, s
            out[i] = best
        return out


def write(counts, path):
    with open(path, "w", encoding="utf-8") as f:
        for k, group in enumerate(EVAL_CONFUSIONS + MORE_CONFUSIONS):
            for w in group:
                f.write(f"{w}\tset\t{k}\n")
        for w in sorted(counts):
            for feature, n in sorted(counts[w].items()):
                if n >= 2 or feature == "*":  # a context seen once carries little evidence
                    f.write(f"{w}\t{feature}\t{n}\n")


def tune(corpus, members, margins, n=2000, seed=4242):
    tune_sentences = corpus.train_sentences[::20]
    count_sentences = [s for k, s in enumerate(corpus.train_sentences) if k % 20 != 0]
    # Pruned as written (count >= 2), so the tuning sees what the postprocessor loads.
    counts = {w: collections.Counter({f: k for f, k in c.items() if k >= 2 or f == "*"})
              for w, c in count(count_sentences, members).items()}
    scorer = Scorer(counts, members)
    rng = random.Random(seed)
    errors = data.real_word_errors(tune_sentences, rng, n)
    spans = []
    for _ in range(n):
        s = rng.choice(tune_sentences)
        k = min(len(s), rng.choice((2, 3, 4, 5, 6, 7, 8)))
        start = rng.randrange(0, len(s) - k + 1)
        spans.append(s[start:start + k])
    clean_words = sum(map(len, spans))
    for margin in margins:
        fixed = sum(scorer.correct(noisy, margin)[i] == clean[i] for clean, noisy, i in errors)
        changed = sum(sum(a != b for a, b in zip(s, scorer.correct(s, margin))) for s in spans)
        print(f"margin {margin:5.2f}: real-word errors fixed {fixed / n:.3f}, "
              f"correct words changed {changed}/{clean_words} ({changed / clean_words:.4%})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="dir with corpus.json (build_data.py)")
    ap.add_argument("--out", help="write confusion_counts.tsv here (the model's directory)")
    ap.add_argument("--tune", action="store_true", help="measure margins on training sentences")
    ap.add_argument("--margins", default="0,1,2,3,4,5,6,8")
    args = ap.parse_args()
    corpus = data.Corpus(args.work)
    members = confusion_sets()
    if args.tune:
        tune(corpus, members, [float(m) for m in args.margins.split(",")])
    if args.out:
        counts = count(corpus.train_sentences, members)
        path = os.path.join(args.out, "confusion_counts.tsv")
        write(counts, path)
        print(f"wrote {path}: {len(counts)} words")


if __name__ == "__main__":
    main()
