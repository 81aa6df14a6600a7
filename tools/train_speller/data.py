"""The speller's corpus (built by build_data.py into WORK/corpus.json) and its clean spans.

A span is what the model is asked to correct: 1-3 words drawn from the accepted spellings by
word frequency (flattened, so mid-frequency words are seen often enough), or 1-8 consecutive words
of a sentence (query-like spans as well as short sentences). Every 50th sentence is held out.
"""
import itertools
import json
import os

# Sampling weight of a word without an onboard count, by scowl level (10: most common).
LEVEL_FLOOR = {10: 30.0, 20: 25.0, 35: 20.0, 40: 15.0, 50: 12.0, 55: 8.0, 60: 5.0, 70: 2.0}


class Corpus:
    def __init__(self, work, drawn_possessives=True):
        """drawn_possessives=False: no scowl possessive forms (dog's) among the drawn words unless
        onboard counts them, so a dropped apostrophe is not taught as an error in plurals (dogs)."""
        with open(os.path.join(work, "corpus.json")) as f:
            c = json.load(f)
        self.sources = c["sources"]
        level, freq = c["level"], c["freq"]
        self.known = set(c["words"]) | set(level)
        vocab, weights = [], []
        for w in sorted(self.known):
            lv = level.get(w, 99)
            if not drawn_possessives and w.endswith("'s") and w not in freq:
                continue
            if w in freq and (lv <= 70 or w in c["words"]):
                weight = freq[w] ** 0.5
            elif lv <= 70:
                weight = LEVEL_FLOOR[min(k for k in LEVEL_FLOOR if k >= lv)]
            else:
                continue
            vocab.append(w)
            weights.append(weight)
        self.vocab, self.weights = vocab, weights
        self.cum_weights = list(itertools.accumulate(weights))  # choices() would sum them per call
        sentences = c["sentences"]
        self.train_sentences = [s for i, s in enumerate(sentences) if i % 50 != 0]
        self.heldout_sentences = [s for i, s in enumerate(sentences) if i % 50 == 0]

    def words(self, rng, k):
        return rng.choices(self.vocab, cum_weights=self.cum_weights, k=k)

    def span(self, rng, heldout=False, single_share=0.4):
        """A clean span (list of words)."""
        if rng.random() < single_share:
            return self.words(rng, rng.choice((1, 1, 1, 1, 2, 3)))
        s = rng.choice(self.heldout_sentences if heldout else self.train_sentences)
        n = min(len(s), rng.choice((2, 2, 3, 3, 4, 4, 5, 5, 6, 7, 8)))
        start = rng.randrange(0, len(s) - n + 1)
        return s[start:start + n]

    def tokenizer_text(self, rng, lines):
        """Clean text for the SentencePiece trainer: sentences plus frequency-drawn words."""
        out = [" ".join(s) for s in rng.sample(self.train_sentences, min(lines // 2, len(self.train_sentences)))]
        out += [" ".join(self.words(rng, 8)) for _ in range(lines - len(out))]
        return out


# Real words typed for one another ("wether" for "weather"): the real-word error set swaps a word
# of a held-out span for another word of its group.
REAL_WORD_CONFUSIONS = [
    ("their", "there", "they're"), ("its", "it's"), ("then", "than"), ("weather", "whether", "wether"),
    ("form", "from"), ("lose", "loose"), ("to", "too"), ("your", "you're"), ("affect", "effect"),
    ("accept", "except"), ("quiet", "quite"), ("where", "were"), ("of", "off"), ("advice", "advise"),
    ("past", "passed"), ("whose", "who's"), ("piece", "peace"), ("principal", "principle"),
    ("hear", "here"), ("new", "knew"), ("right", "write"), ("desert", "dessert"), ("now", "know"),
    ("breath", "breathe"), ("lead", "led"), ("sight", "site"), ("week", "weak"), ("whole", "hole"),
]


def real_word_errors(sentences, rng, n):
    """n (clean span, span with one word swapped, swapped position) from `sentences`: eval.py's
    real-word errors (held-out sentences), confusion_data.py's tuning (training sentences)."""
    group = {w: g for g in REAL_WORD_CONFUSIONS for w in g}
    out = []
    sentences = [s for s in sentences if any(w in group for w in s)]
    while len(out) < n:
        s = rng.choice(sentences)
        at = rng.choice([i for i, w in enumerate(s) if w in group])
        k = rng.choice((3, 4, 5, 6, 7, 8))
        start = max(0, min(at - rng.randrange(k), len(s) - k))
        clean = s[start:start + k]
        i = at - start
        noisy = list(clean)
        noisy[i] = rng.choice([w for w in group[clean[i]] if w != clean[i]])
        out.append((clean, noisy, i))
    return out
