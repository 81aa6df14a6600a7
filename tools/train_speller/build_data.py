"""Builds the speller's training corpus from Debian packages only, into one file in the work dir.

    /usr/bin/python3 tools/train_speller/build_data.py --work /work/speller-work [--no-install]

Sources (each recorded in the output with its size, or as skipped with the reason):
  sentences        wordnet-base (usage examples), fortunes + fortunes-min, dasher-data
                   (English training text), sword-text-web (World English Bible, capped so that
                   its style stays a minority of the sentences)
  spellings        wamerican-large + wbritish-large (lower-case entries: no proper names)
  word frequencies onboard-data /usr/share/onboard/models/en_US.lm unigram counts
                   (fetched with `apt-get download` + `dpkg-deb -x`: no GUI dependencies)
  rarity tiers     scowl size levels (10 most common .. 95 rarest)

Writes WORK/corpus.json: {"sources", "sentences" (lists of lower-case words), "words"
(accepted spellings), "level" (word -> scowl level), "freq" (word -> onboard count)}.
"""
import argparse
import glob
import json
import os
import random
import re
import struct
import subprocess
import zlib

PACKAGES = ["wordnet-base", "fortunes", "fortunes-min", "sword-text-web", "dasher-data", "wamerican-large",
            "wbritish-large", "scowl"]
WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
BIBLE_SHARE = 0.15  # at most this share of all sentences come from the bible


def install(work, sources):
    """apt-get install the data packages; onboard-data is unpacked under WORK/onboard."""
    for pkg in PACKAGES:
        ok = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
        if "install ok installed" in ok.stdout:
            continue
        res = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", pkg], capture_output=True,
                             text=True)
        if res.returncode != 0:
            sources[pkg] = {"skipped": "apt-get install failed: " + res.stderr.strip()[-200:]}
    lm = os.path.join(work, "onboard/usr/share/onboard/models/en_US.lm")
    if not os.path.exists(lm):
        pkgs = os.path.join(work, "pkgs")
        os.makedirs(pkgs, exist_ok=True)
        res = subprocess.run(["apt-get", "download", "onboard-data"], cwd=pkgs, capture_output=True, text=True)
        debs = sorted(glob.glob(os.path.join(pkgs, "onboard-data_*.deb")))
        if res.returncode != 0 or not debs:
            sources["onboard-data"] = {"skipped": "apt-get download failed: " + res.stderr.strip()[-200:]}
        else:
            subprocess.run(["dpkg-deb", "-x", debs[-1], os.path.join(work, "onboard")], check=True)


def _read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="ignore")


def _words(text):
    return WORD.findall(text.lower().replace("\u2019", "'"))


def _split(text):
    return [w for w in (_words(s) for s in SENTENCE_END.split(" ".join(text.split()))) if 2 <= len(w) <= 40]


def dasher():
    path = "/usr/share/dasher/training_english_GB.txt"
    return _split(_read(path)) if os.path.exists(path) else []


def fortunes():
    out = []
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if path.endswith((".dat", ".u8")) or os.path.isdir(path) or os.path.islink(path):
            continue
        for fortune in _read(path).split("\n%\n"):
            out += _split(fortune)
    return out


def wordnet():
    out = []
    for path in sorted(glob.glob("/usr/share/wordnet/data.*")):
        for line in _read(path).splitlines():
            if "|" in line:
                for example in re.findall(r'"([^"]{8,300})"', line.split("|", 1)[1]):
                    out += _split(example)
    return out


def bible():
    """The World English Bible from its SWORD zText module: zlib blocks indexed by *.bzs."""
    out = []
    for d in sorted(glob.glob("/usr/share/sword/modules/texts/ztext/*/")):
        for part in ("ot", "nt"):
            index, blocks = os.path.join(d, part + ".bzs"), os.path.join(d, part + ".bzz")
            if not os.path.exists(index):
                continue
            with open(index, "rb") as f:
                idx = f.read()
            with open(blocks, "rb") as f:
                z = f.read()
            for k in range(0, len(idx) - 11, 12):
                off, size, _ = struct.unpack("<III", idx[k:k + 12])
                text = zlib.decompress(z[off:off + size]).decode("utf-8", errors="ignore")
                text = re.sub(r"<note\b.*?</note>", " ", text, flags=re.S)
                text = re.sub(r"<title\b.*?</title>", " ", text, flags=re.S)
                out += _split(re.sub(r"<[^>]*>", "", text))
    return out


def dictionary():
    words = set()
    for path in ("/usr/share/dict/american-english-large", "/usr/share/dict/british-english-large"):
        if os.path.exists(path):
            words.update(w for w in _read(path).split() if WORD.fullmatch(w))
    return words


def levels():
    level = {}
    paths = [p for p in glob.glob("/usr/share/dict/scowl/*-words.*") + glob.glob("/usr/share/dict/scowl/*-contractions.*")
             if re.search(r"/(english|american|british)-(words|contractions)\.\d+$", p)]
    for path in sorted(paths, key=lambda p: int(p.rsplit(".", 1)[1])):
        n = int(path.rsplit(".", 1)[1])
        for w in _read(path).split():
            if WORD.fullmatch(w):
                level.setdefault(w, n)
    return level


def frequencies(work):
    """Lower-case unigram counts of onboard's en_US language model."""
    path = os.path.join(work, "onboard/usr/share/onboard/models/en_US.lm")
    freq = {}
    if not os.path.exists(path):
        return freq
    section = None
    for line in _read(path).splitlines():
        if line.startswith("\\"):
            section = line.strip()
            continue
        if section == "\\1-grams:":
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                w = parts[1].lower().replace("\u2019", "'")
                if WORD.fullmatch(w):
                    freq[w] = freq.get(w, 0) + int(parts[0])
    return freq


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True)
    ap.add_argument("--no-install", action="store_true", help="use what is installed already")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    sources = {}
    if not args.no_install:
        install(args.work, sources)
    parts = {"dasher-data": dasher(), "fortunes+fortunes-min": fortunes(), "wordnet-base": wordnet()}
    web = bible()
    cap = int(BIBLE_SHARE / (1 - BIBLE_SHARE) * sum(map(len, parts.values())))
    if len(web) > cap:
        web = random.Random(0).sample(web, cap)
    parts["sword-text-web"] = web
    sentences = []
    for name, s in parts.items():
        sources.setdefault(name, {"sentences": len(s)})
        sentences += s
    words, level, freq = dictionary(), levels(), frequencies(args.work)
    sources.setdefault("wamerican-large+wbritish-large", {"words": len(words)})
    sources.setdefault("scowl", {"words": len(level)})
    sources.setdefault("onboard-data", {"words": len(freq)})
    for name, s in sources.items():
        print(f"{name}: {s}")
    out = os.path.join(args.work, "corpus.json")
    with open(out, "w") as f:
        json.dump({"sources": sources, "sentences": sentences, "words": sorted(words), "level": level,
                   "freq": freq}, f)
    print(f"wrote {out}: {len(sentences)} sentences")


if __name__ == "__main__":
    main()
