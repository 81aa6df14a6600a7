#!/usr/bin/env python3
"""The GPU's numbers against the CPU's and the fixtures', through seqpipe-generate (stdlib only).

    gpu_numerics.py --generate PATH [--cuda] [--jobs N] --json OUT.json

1. fixtures (tests/data/t5-tiny-random, t5v11-tiny-random): every case's greedy, greedy with
   min_new_tokens=11 and beam-4 ids from reference.json (transformers' own), fp32; on the CPU
   always, on the GPU with --cuda. Bar: ids exact.
2. speller (models/speller-t5, tests/data/speller-t5-greedy.json, PyTorch's greedy ids): CPU
   fp32 == the file (as tests/tools/speller_parity_test.py checks), and with --cuda: GPU fp32 ==
   CPU fp32 on every input, GPU bf16 == CPU fp32 on >= 99% of them.
3. fp16 (with --cuda): the speller is T5 v1.1 (gated-gelu), which the engine refuses in fp16 as
   HF's overflow story says, so fp16's agreement is measured on the T5 v1.0 fixture
   (t5-tiny-random: greedy, greedy min 11, beam 4) against its fp32 ids, and the speller's
   refusal is recorded.

One seqpipe-generate process per input, as the parity test runs it; they run --jobs at a time
(each CPU one on one thread), since a process start (and a CUDA context) costs more than one
input's decoding.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
SPELLER = os.path.join(ROOT, "models", "speller-t5")


def device_args(generate, device):
    # Builds from before --device existed run on the CPU only; asking them for "cpu" by name
    # would be a usage error, so the flag is given only where --help lists it.
    help_text = subprocess.run([generate, "--help"], capture_output=True, text=True).stdout
    if "--device" not in help_text:
        if device != "cpu":
            return None
        return []
    return ["--device", device]


def run_one(generate, args, timeout=120):
    start = time.monotonic()
    try:
        res = subprocess.run([generate, *args, "--json"], capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if res.returncode != 0:
        return {"error": f"exit {res.returncode}: {res.stderr.strip()[-400:]}"}
    out = json.loads(res.stdout)
    out["wall_s"] = time.monotonic() - start
    return out


def run_all(generate, jobs, arg_lists):
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda a: run_one(generate, a), arg_lists))


def fixtures(generate, dev, jobs, compute_type="float32",
             names=("t5-tiny-random", "t5v11-tiny-random")):
    """Every case of the fixture checkpoints `names`, run on one device: how many give the
    reference ids exactly."""
    cases = []
    for fixture in names:
        model = os.path.join(DATA, fixture)
        with open(os.path.join(model, "reference.json")) as f:
            ref = json.load(f)
        for i, case in enumerate(ref["cases"]):
            ids = ",".join(str(t) for t in case["input_ids"])
            base = ["--model", model, "--ids", ids, "--max-new-tokens", "11", "--threads", "1",
                    "--compute-type", compute_type, *dev]
            cases.append((f"{fixture}[{i}] greedy", base, case["greedy"]["ids"]))
            cases.append((f"{fixture}[{i}] greedy_min11", base + ["--min-new-tokens", "11"],
                          case["greedy_min11"]["ids"]))
            cases.append((f"{fixture}[{i}] beam4", base + ["--num-beams", "4"],
                          case["beam4"]["ids"]))
    results = run_all(generate, jobs, [c[1] for c in cases])
    mismatches = []
    for (name, _, want), got in zip(cases, results):
        if "error" in got:
            mismatches.append(f"{name}: {got['error']}")
        elif got["ids"] != want:
            mismatches.append(f"{name}: got {got['ids']}, want {want}")
    exact = len(cases) - len(mismatches)
    return {"cases": len(cases), "exact": exact, "percent": round(100.0 * exact / len(cases), 2),
            "mismatches": mismatches[:10]}


def speller(generate, dev, compute_type, jobs, limit):
    with open(os.path.join(DATA, "speller-t5-greedy.json")) as f:
        ref = json.load(f)
    ref["cases"] = ref["cases"][:limit]
    args = [["--model", SPELLER, "--text", c["text"], "--max-new-tokens",
             str(ref["max_new_tokens"]), "--threads", "1", "--compute-type", compute_type, *dev]
            for c in ref["cases"]]
    start = time.monotonic()
    results = run_all(generate, jobs, args)
    errors = [f"{c['text']!r}: {r['error']}" for c, r in zip(ref["cases"], results) if "error" in r]
    return {"texts": [c["text"] for c in ref["cases"]], "torch_ids": [c["ids"] for c in ref["cases"]],
            "ids": [r.get("ids") for r in results], "errors": errors[:10],
            "wall_s": round(time.monotonic() - start, 1)}


def agreement(a, b):
    """How many inputs give the same ids, and the first few that do not."""
    same = sum(1 for x, y in zip(a["ids"], b) if x is not None and x == y)
    diff = [f"{t!r}: {x} != {y}" for t, x, y in zip(a["texts"], a["ids"], b) if x != y]
    return {"inputs": len(b), "same": same, "percent": round(100.0 * same / len(b), 2),
            "differences": diff[:5]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--generate", required=True)
    p.add_argument("--cuda", default="", help="the device name for the GPU runs (e.g. cuda)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--gpu-jobs", type=int, default=8)
    p.add_argument("--json", required=True)
    p.add_argument("--speller-inputs", type=int, default=None,
                   help="only the first N speller inputs (default: all 200)")
    a = p.parse_args()

    out = {}
    cpu = device_args(a.generate, "cpu")
    out["fixtures_cpu_fp32"] = fixtures(a.generate, cpu, a.jobs)
    sp_cpu = speller(a.generate, cpu, "float32", a.jobs, a.speller_inputs)
    out["speller_cpu_fp32_vs_torch"] = agreement(sp_cpu, sp_cpu["torch_ids"])
    out["speller_cpu_fp32_vs_torch"]["errors"] = sp_cpu["errors"]
    gpu = device_args(a.generate, a.cuda) if a.cuda else None
    if not a.cuda:
        out["gpu"] = "skipped: no GPU"
    elif gpu is None:
        out["gpu"] = "skipped: this seqpipe-generate has no --device flag"
    elif gpu is not None:
        out["fixtures_gpu_fp32"] = fixtures(a.generate, gpu, a.gpu_jobs)
        for ct, key in (("float32", "fp32"), ("bfloat16", "bf16")):
            sp = speller(a.generate, gpu, ct, a.gpu_jobs, a.speller_inputs)
            out[f"speller_gpu_{key}_vs_cpu_fp32"] = agreement(sp, sp_cpu["ids"])
            out[f"speller_gpu_{key}_vs_cpu_fp32"]["errors"] = sp["errors"]
            out[f"speller_gpu_{key}_vs_cpu_fp32"]["wall_s"] = sp["wall_s"]
        out["fixture_v10_gpu_fp16"] = fixtures(a.generate, gpu, a.gpu_jobs, "float16",
                                               ("t5-tiny-random",))
        refusal = run_one(a.generate, ["--model", SPELLER, "--text", "teh", "--compute-type",
                                       "float16", *gpu])
        out["speller_gpu_fp16"] = refusal.get("error", "accepted (expected a refusal)")
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    for key, value in out.items():
        if isinstance(value, dict):
            shown = {k: v for k, v in value.items() if k not in ("differences", "mismatches", "errors")}
            print(f"{key}: {shown}")
            for line in value.get("mismatches", []) + value.get("differences", []) + value.get("errors", []):
                print(f"  {line}")
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    sys.exit(main())
