"""A seeded noise model of human misspellings, applied word by word.

Operations: keyboard-neighbour substitution, deletion, insertion (of a neighbour key),
transposition, doubled/undoubled letters, phonetic confusions (ie/ei, -ance/-ence, -ant/-ent,
c/k/s, ph/f, silent letters), split and merged words, dropped apostrophes. A share of inputs stay
clean so the model learns to leave correct text alone. With `RealMisspellings` (real pairs such
as ../shared/spelling/train_pairs.tsv), a share of the misspelled words are ones people typed.
"""

ROWS = ["qwertyuiop", "asdfghjkl", "zxcvbnm"]
NEIGHBOURS = {}
for r, row in enumerate(ROWS):
    for c, ch in enumerate(row):
        near = set()
        for dr in (-1, 0, 1):
            rr = r + dr
            if 0 <= rr < len(ROWS):
                for dc in (-1, 0, 1):
                    cc = c + dc + (0 if dr == 0 else (-1 if dr > 0 else 0))
                    if 0 <= cc < len(ROWS[rr]) and ROWS[rr][cc] != ch:
                        near.add(ROWS[rr][cc])
        NEIGHBOURS[ch] = sorted(near)

PHONETIC = [("ie", "ei"), ("ei", "ie"), ("ance", "ence"), ("ence", "ance"), ("ant", "ent"), ("ent", "ant"),
            ("ible", "able"), ("able", "ible"), ("ph", "f"), ("f", "ph"), ("c", "k"), ("k", "c"), ("c", "s"),
            ("s", "c"), ("ck", "k"), ("tion", "sion"), ("sion", "tion"), ("ise", "ize"), ("ize", "ise"),
            ("er", "or"), ("or", "er"), ("ar", "er"), ("y", "ie"), ("ee", "ea"), ("ea", "ee"), ("ou", "o"),
            ("kn", "n"), ("wr", "r"), ("mb", "m"), ("gh", "g"), ("wh", "w"), ("sc", "s"), ("ps", "s"),
            ("gn", "n"), ("our", "or"), ("ful", "full"), ("ll", "l"), ("ss", "s"), ("e", "a"), ("a", "e"),
            ("i", "e"), ("e", "i"), ("o", "u")]


def _letters(word):
    return [i for i, ch in enumerate(word) if ch.isalpha()]


def misspell(word, rng):
    """One or two edits of a single word (never returns it unchanged when it can be changed)."""
    for _ in range(10):
        w = word
        for _ in range(1 if len(word) <= 3 else rng.choice((1, 1, 1, 2))):
            w = _edit(w, rng)
        if w != word and w:
            return w
    return word


def _edit(w, rng):
    idx = _letters(w)
    if not idx:
        return w
    op = rng.choices(["sub", "del", "ins", "swap", "double", "undouble", "phon", "silent_e", "apos"],
                     weights=[14, 16, 10, 12, 6, 8, 24, 4, 6])[0]
    i = rng.choice(idx)
    if op == "sub":
        near = NEIGHBOURS.get(w[i])
        return w[:i] + rng.choice(near) + w[i + 1:] if near else w
    if op == "del" and len(w) > 2:
        return w[:i] + w[i + 1:]
    if op == "ins":
        near = NEIGHBOURS.get(w[i], [w[i]])
        return w[:i] + rng.choice(near + [w[i]]) + w[i:]
    if op == "swap" and i + 1 < len(w):
        return w[:i] + w[i + 1] + w[i] + w[i + 2:]
    if op == "double":
        return w[:i] + w[i] + w[i:]
    if op == "undouble":
        pairs = [k for k in range(len(w) - 1) if w[k] == w[k + 1]]
        if pairs:
            k = rng.choice(pairs)
            return w[:k] + w[k + 1:]
    if op == "phon":
        options = [(a, b) for a, b in PHONETIC if a in w]
        if options:
            a, b = rng.choice(options)
            starts = [k for k in range(len(w)) if w.startswith(a, k)]
            k = rng.choice(starts)
            return w[:k] + b + w[k + len(a):]
    if op == "silent_e" and w.endswith("e") and len(w) > 3:
        return w[:-1]
    if op == "apos" and "'" in w:
        return w.replace("'", "")
    return w


class RealMisspellings:
    """Real misspellings by correct word, from a `misspelled<TAB>correct[<TAB>source]` file with a
    header line. Pairs that differ by more than `max_length_gap` letters (Birkbeck's "a" for
    "above") are left out: they teach guessing, not spelling."""

    def __init__(self, path, max_length_gap=3):
        self.by_word = {}
        with open(path) as f:
            next(f)
            for number, line in enumerate(f, start=2):
                fields = line.rstrip("\n").split("\t")
                if len(fields) < 2:
                    raise ValueError(f"{path}:{number}: want misspelled<TAB>correct, got {line.strip()!r}")
                bad, good = fields[:2]
                bad, good = bad.lower(), good.lower()
                if bad != good and bad and abs(len(bad) - len(good)) <= max_length_gap:
                    self.by_word.setdefault(good, []).append(bad)
        self.words = sorted(self.by_word)

    def word(self, rng):
        return rng.choice(self.words)

    def misspell(self, word, rng):
        return rng.choice(self.by_word[word])


def corrupt(words, rng, clean_share=0.2, word_rate=0.35, real=None, real_rate=0.0):
    """The noisy version of a clean span (list of words) -> text. With `real` (RealMisspellings), a
    word that people have misspelled is given one of their misspellings with chance `real_rate`."""
    if rng.random() < clean_share:
        return " ".join(words)
    out = []
    changed = False
    for w in words:
        if "'" in w and rng.random() < 0.4:  # apostrophes are often left out: cant, dont, its
            out.append(w.replace("'", ""))
            changed = True
        elif rng.random() < word_rate or (len(words) == 1):
            if real and w in real.by_word and rng.random() < real_rate:
                out.append(real.misspell(w, rng))
            else:
                out.append(misspell(w, rng))
            changed = True
        else:
            out.append(w)
    if len(out) > 1 and rng.random() < 0.06:  # merged words
        k = rng.randrange(len(out) - 1)
        out[k:k + 2] = [out[k] + out[k + 1]]
    if rng.random() < 0.05:  # a split word
        k = rng.randrange(len(out))
        if len(out[k]) > 5:
            c = rng.randrange(2, len(out[k]) - 2)
            out[k:k + 1] = [out[k][:c], out[k][c:]]
    if not changed and len(words) > 1:
        k = rng.randrange(len(out))
        out[k] = misspell(out[k], rng)
    return " ".join(out)
