"""Checks that seqpipe's C++ engine decodes a trained speller checkpoint exactly as the PyTorch
model in model.py does: greedy output ids equal on N held-out noisy inputs.

    /usr/bin/python3 tools/train_speller/check_engine.py --model models/speller-t5 \
        --engine build/release/tools/seqpipe-generate --work /work/speller-work -n 200

Inputs: held-out synthetic misspellings (held-out sentences and drawn words, the training noise
model, a fixed seed), from WORK/corpus.json; without --work (no corpus needed, as in the test),
spans of a built-in list of sentences misspelled by the same noise model.
The engine runs once per input with --threads 1; its generate time (encoder + greedy decoding)
is reported. Exit status 0 only when every input matched.

--write-reference FILE also stores the inputs and PyTorch's ids (with the model's sha256) for
tests/tools/speller_parity_test.py, which repeats the engine side of this check in CI without torch:

    /usr/bin/python3 tools/train_speller/check_engine.py --model models/speller-t5 \
        --engine build/release/tools/seqpipe-generate --work /work/speller-work -n 200 \
        --write-reference tests/data/speller-t5-greedy.json
"""
import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys

import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import noise  # noqa: E402
from model import load_dir  # noqa: E402
from eval import report  # noqa: E402
from train import MAX_LEN, collate  # noqa: E402

# Without a corpus: spans of these sentences, misspelled by the training noise model.
SENTENCES = ["i can't believe the weather is so nice today", "please receive the package tomorrow morning",
             "we definitely need separate rooms for the night", "which one of these is better for my friend",
             "the government announced a new policy yesterday", "it occurred to me that they were not there",
             "until now nobody knew where the library was", "their house is next to the old church",
             "the quick brown fox jumps over the lazy dog", "she was surprised by the beautiful garden",
             "accommodation in london is very expensive", "he doesn't know what happened after the meeting",
             "you should always remember your first teacher", "the committee will recommend a different approach",
             "a little knowledge is a dangerous thing", "the restaurant was closed because of the holiday"]


def torch_greedy(model, sp, texts, max_new, batch=32):
    out = []
    for i in range(0, len(texts), batch):
        src = [sp.encode(t)[:MAX_LEN - 1] + [1] for t in texts[i:i + batch]]
        ids, mask, _, _ = collate(src, [[1]] * len(src))
        for row in model.greedy(ids, mask, max_new).tolist():
            if 1 in row:
                row = row[:row.index(1) + 1]  # the engine stops at eos; padding after it is not output
            out.append(row)
    return out


def inputs(work, n, seed):
    rng = random.Random(seed)
    if not work:
        out = []
        for _ in range(n):
            words = rng.choice(SENTENCES).split()
            k = rng.randint(1, 6)
            start = rng.randrange(0, len(words) - k + 1)
            out.append(noise.corrupt(words[start:start + k], rng))
        return out
    import data
    corpus = data.Corpus(work)
    return [noise.corrupt(corpus.span(rng, heldout=True), rng) for _ in range(n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--engine", required=True, help="path of seqpipe-generate")
    ap.add_argument("--work", help="dir with corpus.json (build_data.py) for held-out inputs")
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--max-new-tokens", type=int, default=MAX_LEN)
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--write-reference", help="write the inputs and PyTorch's greedy ids here (see above)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, _ = load_dir(args.model)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.model, "spiece.model"))
    texts = inputs(args.work, args.n, args.seed)
    expected = torch_greedy(model, sp, texts, args.max_new_tokens)
    same, mismatches, gen_ms = 0, [], []
    for text, ids in zip(texts, expected):
        res = subprocess.run([args.engine, "--model", args.model, "--text", text, "--max-new-tokens",
                              str(args.max_new_tokens), "--threads", "1", "--json"], capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"{args.engine} failed on {text!r}: {res.stderr.strip()}")
        got = json.loads(res.stdout)
        if got["input_ids"] != sp.encode(text)[:MAX_LEN - 1] + [1]:
            mismatches.append({"text": text, "why": "input ids differ", "engine": got["input_ids"]})
        elif got["ids"] == ids:
            same += 1
        else:
            mismatches.append({"text": text, "torch": ids, "engine": got["ids"]})
        gen_ms.append(got["timings_ms"]["generate"])
    if args.write_reference:
        with open(os.path.join(args.model, "model.safetensors"), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        head = {"model_sha256": digest, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
                "source": "PyTorch greedy (tools/train_speller/model.py), held-out noisy inputs"}
        cases = ",\n".join(json.dumps({"text": t, "ids": ids}) for t, ids in zip(texts, expected))
        with open(args.write_reference, "w") as f:  # one case a line: readable diffs
            f.write(json.dumps(head)[:-1] + ', "cases": [\n' + cases + "\n]}\n")
    figures = {"inputs": len(texts), "equal": same, "mismatches": mismatches[:10],
               "engine_generate_ms_median": round(statistics.median(gen_ms), 2),
               "engine_generate_ms_p90": round(sorted(gen_ms)[int(0.9 * (len(gen_ms) - 1))], 2)}
    report(figures, args.json)
    sys.exit(0 if same == len(texts) else 1)


if __name__ == "__main__":
    main()
