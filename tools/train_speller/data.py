"""Training text for the speller, from Debian packages only (scripts: install_data.sh).

Sentences: dasher-data (English training text), fortunes + fortunes-min, WordNet usage examples
(wordnet-base). Accepted spellings: wamerican-large + wbritish-large. Rarity tiers: scowl size
levels (10 = most common .. 95 = rarest). Word frequencies: counted over the sentences.
Not used (yet): sword-text-web (its zText module needs a SWORD reader) and onboard-data.
"""
import collections
import glob
import os
import random
import re

WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def _read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="ignore")


def sentences():
    out = []
    dasher = "/usr/share/dasher/training_english_GB.txt"
    if os.path.exists(dasher):
        out += re.split(r"(?<=[.!?])\s+", _read(dasher))
    for path in glob.glob("/usr/share/games/fortunes/*"):
        if path.endswith((".dat", ".u8")) or os.path.isdir(path):
            continue
        for fortune in _read(path).split("\n%\n"):
            out += re.split(r"(?<=[.!?])\s+", " ".join(fortune.split()))
    for path in glob.glob("/usr/share/wordnet/data.*"):
        for line in _read(path).splitlines():
            if "|" in line:
                out += re.findall(r'"([^"]{8,200})"', line.split("|", 1)[1])
    cleaned = []
    for s in out:
        words = WORD.findall(s.lower().replace("\u2019", "'"))
        if 2 <= len(words) <= 40:
            cleaned.append(words)
    return cleaned


def dictionary():
    words = set()
    for path in ("/usr/share/dict/american-english-large", "/usr/share/dict/british-english-large"):
        for w in _read(path).split():
            if WORD.fullmatch(w):  # lower case only: no proper names
                words.add(w)
    return words


def tiers():
    """word -> scowl size level (smaller: more common)."""
    level = {}
    for path in sorted(glob.glob("/usr/share/dict/scowl/english-words.*") +
                       glob.glob("/usr/share/dict/scowl/english-contractions.*") +
                       glob.glob("/usr/share/dict/scowl/american-words.*") +
                       glob.glob("/usr/share/dict/scowl/british-words.*"),
                       key=lambda p: int(p.rsplit(".", 1)[1])):
        n = int(path.rsplit(".", 1)[1])
        for w in _read(path).split():
            if WORD.fullmatch(w):
                level.setdefault(w, n)
    return level


class Corpus:
    def __init__(self, seed=0):
        self.sentences = sentences()
        self.words = dictionary()
        self.level = tiers()
        counts = collections.Counter(w for s in self.sentences for w in s)
        # Words to correct towards: known spellings. Weight: corpus frequency, plus a floor by
        # rarity tier so that common words absent from the sentences still appear.
        vocab = sorted(w for w in self.words | set(self.level) if self.level.get(w, 99) <= 60 or counts[w] >= 2)
        self.vocab = vocab
        self.weights = [counts[w] + {10: 30, 20: 20, 35: 10, 40: 6, 50: 3, 55: 2, 60: 1}.get(self.level.get(w, 99), 0.5)
                        for w in vocab]
        self.known = self.words | set(self.level)
        self.rng = random.Random(seed)
        # Held-out sentences for evaluation: every 50th.
        self.train_sentences = [s for i, s in enumerate(self.sentences) if i % 50 != 0]
        self.heldout_sentences = [s for i, s in enumerate(self.sentences) if i % 50 == 0]

    def sample_words(self, k):
        return self.rng.choices(self.vocab, weights=self.weights, k=k)

    def span(self, rng, heldout=False):
        """A clean query-like span: 1-6 words of a sentence, or 1-3 dictionary words."""
        pool = self.heldout_sentences if heldout else self.train_sentences
        if rng.random() < 0.35:
            return rng.choices(self.vocab, weights=self.weights, k=rng.choice((1, 1, 1, 2, 3)))
        s = rng.choice(pool)
        n = min(len(s), rng.choice((1, 2, 2, 3, 3, 4, 4, 5, 6)))
        start = rng.randrange(0, len(s) - n + 1)
        return s[start:start + n]
