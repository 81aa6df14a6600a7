#!/usr/bin/env python3
"""The GPU check's bars as a markdown table, from what scripts/gpu-check.sh's steps left.

    gpu_bars.py WORK_DIR OUT_DIR

Reads OUT/numerics.json (scripts/gpu_numerics.py), WORK/engine_bench.out (engine_bench's text),
OUT/torch_t5.json (bench/torch_t5.py), OUT/pipeline.json (seqpipe-bench sweep --json) and
WORK/steps.tsv (why a step did not run). A bar is "met", "NOT met" or "not measured: why".
"""
import json
import os
import re
import sys


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def step_status(work):
    status = {}
    try:
        with open(os.path.join(work, "steps.tsv")) as f:
            for line in f:
                name, text, _ = line.rstrip("\n").split("\t")
                status[name] = text
    except OSError:
        pass
    return status


def engine_bench(work):
    """{compute type: {"batch1_ms": x, "batches": {n: seqs/s}}} from the GPU runs' text."""
    try:
        text = open(os.path.join(work, "engine_bench.out")).read()
    except OSError:
        return {}
    out = {}
    for part in text.split("--- engine_bench --device cuda --compute-type ")[1:]:
        part = part.split("\n--- ")[0]  # up to the next run's header (the eager one, say)
        ct = part.split()[0]
        m = re.search(r"^generate\s+median\s+([\d.]+) ms", part, re.M)
        batches = {int(b): float(s) for b, s in
                   re.findall(r"^batch\s+(\d+): generate .*?([\d.]+) sequences/s", part, re.M)}
        out[ct] = {"batch1_ms": float(m.group(1)) if m else None, "batches": batches}
    return out


def verdict(ok):
    return "met" if ok else "**NOT met**"


def main():
    work, out_dir = sys.argv[1], sys.argv[2]
    steps = step_status(work)
    rows = []

    def why(step):
        s = steps.get(step)
        return f"not measured: {step} {s}" if s else f"not measured: {step} has not run"

    num = load_json(os.path.join(out_dir, "numerics.json")) or {}
    f = num.get("fixtures_cpu_fp32")
    s = num.get("speller_cpu_fp32_vs_torch")
    if f and s:
        rows.append(("CPU fp32 (the reference side): fixture ids exact, speller == PyTorch",
                     f"fixtures {f['exact']}/{f['cases']}, speller {s['same']}/{s['inputs']}",
                     verdict(f["exact"] == f["cases"] and s["same"] == s["inputs"])))
    f = num.get("fixtures_gpu_fp32")
    s = num.get("speller_gpu_fp32_vs_cpu_fp32")
    if f and s:
        rows.append(("GPU fp32: fixture ids exact (and speller == CPU fp32)",
                     f"fixtures {f['exact']}/{f['cases']}, speller {s['same']}/{s['inputs']}",
                     verdict(f["exact"] == f["cases"] and s["same"] == s["inputs"])))
    else:
        rows.append(("GPU fp32: fixture ids exact", num.get("gpu") or why("numerics"), ""))
    s = num.get("speller_gpu_bf16_vs_cpu_fp32")
    if s:
        rows.append(("GPU bf16: == CPU fp32 greedy ids on >= 99% of the speller inputs",
                     f"{s['same']}/{s['inputs']} = {s['percent']}%", verdict(s["percent"] >= 99.0)))
    else:
        rows.append(("GPU bf16: >= 99% speller agreement", num.get("gpu") or why("numerics"), ""))

    eb = engine_bench(work)
    torch = load_json(os.path.join(out_dir, "torch_t5.json")) or {}
    if not eb:
        rows.append(("engine batch-1 generate <= 1.5 ms", why("engine_bench"), ""))
        rows.append(("engine batch 64 >= 10,000 sequences/s and >= 10x PyTorch", why("engine_bench"), ""))
    for ct, r in eb.items():
        ms = r["batch1_ms"]
        rows.append((f"engine batch-1 generate <= 1.5 ms ({ct})",
                     f"{ms} ms (median)" if ms is not None else "no figure in the output",
                     verdict(ms is not None and ms <= 1.5)))
        sps = r["batches"].get(64)
        t = (torch.get("dtypes") or {}).get(ct, {}).get("batch64", {}).get("sequences_per_s")
        if sps is None:
            largest = max(r["batches"].items(), default=None)
            rows.append((f"engine batch 64 >= 10,000 sequences/s ({ct})",
                         "not measured: engine_bench runs no batch 64" +
                         (f" (batch {largest[0]}: {largest[1]:.0f}/s)" if largest else ""), ""))
            continue
        rows.append((f"engine batch 64 >= 10,000 sequences/s ({ct})", f"{sps:.0f}/s",
                     verdict(sps >= 10000)))
        if t:
            rows.append((f"engine batch 64 >= 10x PyTorch ({ct})",
                         f"{sps:.0f} / {t:.0f} = {sps / t:.1f}x", verdict(sps >= 10 * t)))
        else:
            rows.append((f"engine batch 64 >= 10x PyTorch ({ct})",
                         torch.get("skipped") or why("torch_bench"), ""))
    for ct, r in (torch.get("dtypes") or {}).items():
        rows.append((f"PyTorch {torch.get('torch')} / transformers {torch.get('transformers')} ({ct}), for reference",
                     f"batch-1 generate {r['batch1']['median_ms']} ms; batch 64 "
                     f"{r['batch64']['sequences_per_s']}/s", ""))

    pipe = load_json(os.path.join(out_dir, "pipeline.json"))
    if not pipe:
        rows.append(("pipeline p50 <= 2.5 ms and p99 <= 4 ms at concurrency 1", why("pipeline"), ""))
    for c in (pipe or {}).get("configurations", []):
        name = ", ".join(f"{k}={v}" for k, v in c["config"].items())
        one = next((lv for lv in c["levels"] if lv.get("concurrency") == 1), None)
        if one:
            p50, p99 = one["p50_us"] / 1000, one["p99_us"] / 1000
            rows.append((f"pipeline p50 <= 2.5 ms, p99 <= 4 ms at concurrency 1 ({name})",
                         f"p50 {p50:.2f} ms, p99 {p99:.2f} ms ({one['errors']} errors)",
                         verdict(p50 <= 2.5 and p99 <= 4 and one["errors"] == 0)))
        best = c.get("best_level")
        if best is not None:
            lv = c["levels"][best]
            rows.append((f"pipeline: highest rate with p99 < 50 ms ({name})",
                         f"{lv['throughput_per_s']:.0f} requests/s at concurrency "
                         f"{lv['concurrency']} (p99 {lv['p99_us'] / 1000:.2f} ms)", ""))
        else:
            rows.append((f"pipeline: highest rate with p99 < 50 ms ({name})", "no level met it", ""))

    print("## Bars")
    print()
    print("| bar | measured | |")
    print("|---|---|---|")
    for bar, measured, v in rows:
        print(f"| {bar} | {measured} | {v} |")


if __name__ == "__main__":
    main()
