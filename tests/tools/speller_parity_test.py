"""The shipped speller through seqpipe's C++ engine gives PyTorch's greedy ids on 200 held-out inputs.

tests/data/speller-t5-greedy.json holds the inputs (held-out sentences and words with the training
noise model) and the ids that tools/train_speller/model.py's greedy decoding produced for them;
tools/train_speller/check_engine.py --write-reference made it, from the same model file (its
sha256 is checked, so a retrained model with a stale reference fails here, naming the fix). This
side needs no torch: it runs seqpipe-generate on each input and compares ids exactly.

    /usr/bin/python3 tests/tools/speller_parity_test.py build/release/tools/seqpipe-generate
"""
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "speller-t5")
REFERENCE = os.path.join(ROOT, "tests", "data", "speller-t5-greedy.json")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: speller_parity_test.py SEQPIPE_GENERATE")
    engine = sys.argv[1]
    with open(REFERENCE) as f:
        ref = json.load(f)
    with open(os.path.join(MODEL, "model.safetensors"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != ref["model_sha256"]:
        sys.exit(f"FAIL: {MODEL}/model.safetensors is not the model {REFERENCE} was made from; "
                 "rerun tools/train_speller/check_engine.py --write-reference (see its help)")
    cases = ref["cases"]
    if len(cases) < 200:
        sys.exit(f"FAIL: {REFERENCE} has {len(cases)} cases, the bar is 200")
    mismatches = []
    for case in cases:
        res = subprocess.run([engine, "--model", MODEL, "--text", case["text"], "--max-new-tokens",
                              str(ref["max_new_tokens"]), "--threads", "1", "--json"],
                             capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            sys.exit(f"FAIL: {engine} failed on {case['text']!r}: {res.stderr.strip()}")
        got = json.loads(res.stdout)["ids"]
        if got != case["ids"]:
            mismatches.append(f"{case['text']!r}: engine {got} != torch {case['ids']}")
    if mismatches:
        print("\n".join(mismatches[:10]), file=sys.stderr)
        sys.exit(f"FAIL: {len(mismatches)} of {len(cases)} inputs differ from PyTorch's greedy ids")
    print(f"ok: engine ids == PyTorch greedy ids on {len(cases)} held-out inputs")


if __name__ == "__main__":
    main()
