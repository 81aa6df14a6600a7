"""Writes the postprocessor's noisy-channel data next to the model (postprocessor.word_counts and
postprocessor.edit_counts; services/postprocessor/noisy_channel.h reads them):

  word_counts.tsv  word<TAB>count: onboard-data's en_US.lm unigram counts, lower-cased and summed
                   (build_data.py's corpus.json "freq"): how common a candidate correction is
  edit_counts.tsv  kind<TAB>letters<TAB>count: how often each single-letter edit turns a word into a
                   real misspelling, counted on ../shared/spelling/train_pairs.tsv (Birkbeck and
                   Holbrook; none of its misspellings is in dev_words.tsv or the test set) along the
                   cheapest edit path. Kinds: d (a letter of the word left out), i (a letter typed
                   in), s (letters[1] typed for letters[0]), t (letters[0..1] typed swapped)

    /usr/bin/python3 tools/train_speller/channel_data.py --work /work/speller-work \\
        --pairs ../shared/spelling/train_pairs.tsv --out models/speller-t5
"""
import argparse
import collections
import json
import os

# Pairs further apart than this are not one misspelling of the word ("a" -> "above" in Birkbeck).
MAX_EDITS = 3


def edits(word, typed):
    """The edits of one cheapest (Damerau-Levenshtein) path from word to typed."""
    n, m = len(word), len(typed)
    d = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        d[i][0] = i
    for j in range(m + 1):
        d[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (word[i - 1] != typed[j - 1]))
            if i > 1 and j > 1 and word[i - 1] == typed[j - 2] and word[i - 2] == typed[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    out, i, j = [], n, m
    while i > 0 or j > 0:
        if (i > 1 and j > 1 and word[i - 1] == typed[j - 2] and word[i - 2] == typed[j - 1]
                and word[i - 1] != word[i - 2] and d[i][j] == d[i - 2][j - 2] + 1):
            out.append(("t", word[i - 2:i]))
            i, j = i - 2, j - 2
        elif i > 0 and j > 0 and d[i][j] == d[i - 1][j - 1] + (word[i - 1] != typed[j - 1]):
            if word[i - 1] != typed[j - 1]:
                out.append(("s", word[i - 1] + typed[j - 1]))
            i, j = i - 1, j - 1
        elif i > 0 and d[i][j] == d[i - 1][j] + 1:
            out.append(("d", word[i - 1]))
            i -= 1
        else:
            out.append(("i", typed[j - 1]))
            j -= 1
    return d[n][m], out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="dir with corpus.json (build_data.py)")
    ap.add_argument("--pairs", required=True, help="misspelled<TAB>correct training pairs")
    ap.add_argument("--out", required=True, help="the model's directory")
    args = ap.parse_args()
    with open(os.path.join(args.work, "corpus.json")) as f:
        freq = json.load(f)["freq"]
    with open(os.path.join(args.out, "word_counts.tsv"), "w") as f:
        f.write("# word<TAB>count: onboard-data en_US.lm unigram counts, lower-cased (GPL-3+)\n")
        for w in sorted(freq):
            f.write(f"{w}\t{freq[w]}\n")
    counts, used = collections.Counter(), 0
    with open(args.pairs, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 2 or parts[0] == "misspelled":
                continue
            typed, word = parts[0].lower(), parts[1].lower()
            if typed == word or " " in typed + word:
                continue
            distance, path = edits(word, typed)
            if distance > MAX_EDITS or distance > len(word) // 2 + 1:
                continue
            used += 1
            counts.update(path)
    with open(os.path.join(args.out, "edit_counts.tsv"), "w") as f:
        f.write(f"# kind<TAB>letters<TAB>count: edits of {used} real misspellings (train_pairs.tsv), "
                "tools/train_speller/channel_data.py\n")
        for (kind, letters), n in sorted(counts.items()):
            f.write(f"{kind}\t{letters}\t{n}\n")
    print(f"{len(freq)} word counts, {len(counts)} edits from {used} pairs")


if __name__ == "__main__":
    main()
