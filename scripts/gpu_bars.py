#!/usr/bin/env python3
"""The GPU check's bars as a markdown table, from what scripts/gpu-check.sh's steps left.

    gpu_bars.py WORK_DIR OUT_DIR

Reads OUT/numerics.json (scripts/gpu_numerics.py), WORK/engine_bench.out (engine_bench's text),
OUT/torch_t5.json (bench/torch_t5.py), OUT/pipeline.json (seqpipe-bench sweep --json),
WORK/profile.out (engine_bench --profile's tables) and WORK/steps.tsv (why a step did not run).
A bar is "met", "NOT met" or "not measured: why"; the profile's tables follow the bars.
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


# The bars (docs/GPU.md): t5-small, 9 tokens in, exactly 11 out, greedy, fp16 (bf16 beside it).
BATCH1_MS, BATCH1_STRETCH_MS, STEP_US = 1.5, 1.0, 80
BATCH64_PER_S, TORCH_RATIO = 15000, 15
AGREEMENT_PERCENT = 99.0
PIPE_P50_MS, PIPE_P99_MS, PIPE_RATE_PER_S = 2.5, 4.0, 2 * 1750


def engine_bench(work):
    """{compute type: {"batch1_ms", "step_ms", "batches": {n: seqs/s}}} from the GPU runs' text."""
    try:
        text = open(os.path.join(work, "engine_bench.out")).read()
    except OSError:
        return {}
    out = {}
    for part in text.split("--- engine_bench --device cuda --compute-type ")[1:]:
        part = part.split("\n--- ")[0]  # up to the next run's header (the eager one, say)
        ct = part.split()[0]
        gen = re.search(r"^generate\s+median\s+([\d.]+) ms", part, re.M)
        step = re.search(r"^decoder step\s+median\s+([\d.]+) ms", part, re.M)
        batches = {int(b): float(s) for b, s in
                   re.findall(r"^batch\s+(\d+): generate .*?([\d.]+) sequences/s", part, re.M)}
        out[ct] = {"batch1_ms": float(gen.group(1)) if gen else None,
                   "step_ms": float(step.group(1)) if step else None, "batches": batches}
    return out


def profile_tables(work):
    """engine_bench --profile's tables from the profile step, as they were printed."""
    try:
        text = open(os.path.join(work, "profile.out")).read()
    except OSError:
        return ""
    return text if "== per-op profile" in text else ""


def verdict(ok):
    return "met" if ok else "**NOT met**"


def numerics_rows(num, why):
    rows = []
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
    bar = f"GPU bf16: == CPU fp32 greedy ids on >= {AGREEMENT_PERCENT:g}% of the speller inputs"
    if s:
        rows.append((bar, f"{s['same']}/{s['inputs']} = {s['percent']}%",
                     verdict(s["percent"] >= AGREEMENT_PERCENT)))
    else:
        rows.append((bar, num.get("gpu") or why("numerics"), ""))
    f = num.get("fixture_v10_gpu_fp16")
    bar = (f"GPU fp16: == fp32 ids on >= {AGREEMENT_PERCENT:g}% (T5 v1.0 fixture: the speller is "
           "v1.1, refused in fp16)")
    if f:
        refusal = num.get("speller_gpu_fp16", "")
        rows.append((bar, f"{f['exact']}/{f['cases']} = {f['percent']}%; speller in fp16: "
                     f"{str(refusal)[:80]}", verdict(f["percent"] >= AGREEMENT_PERCENT)))
    else:
        rows.append((bar, num.get("gpu") or why("numerics"), ""))
    return rows


def speed_rows(eb, torch, why):
    rows = []
    if not eb:
        for bar in (f"engine batch-1 generate <= {BATCH1_MS} ms (fp16)",
                    f"engine decoder step <= {STEP_US} us (fp16)",
                    f"engine batch 64 >= {BATCH64_PER_S:,} sequences/s (fp16)",
                    f"engine batch 64 >= {TORCH_RATIO}x PyTorch fp16"):
            rows.append((bar, why("engine_bench"), ""))
    torch_types = torch.get("dtypes") or {}
    for ct, r in eb.items():
        ms, step = r["batch1_ms"], r["step_ms"]
        rows.append((f"engine batch-1 generate <= {BATCH1_MS} ms, stretch {BATCH1_STRETCH_MS} ({ct})",
                     f"{ms} ms (median)" if ms is not None else "no figure in the output",
                     verdict(ms is not None and ms <= BATCH1_MS) +
                     (", stretch met" if ms is not None and ms <= BATCH1_STRETCH_MS else "")))
        rows.append((f"engine decoder step <= {STEP_US} us (stretch; {ct}, batch 1)",
                     f"{step * 1000:.0f} us (median)" if step is not None else "no figure",
                     verdict(step is not None and step * 1000 <= STEP_US)))
        sps = r["batches"].get(64)
        if sps is None:
            rows.append((f"engine batch 64 >= {BATCH64_PER_S:,} sequences/s ({ct})",
                         "not measured: engine_bench ran no batch 64", ""))
            continue
        rows.append((f"engine batch 64 >= {BATCH64_PER_S:,} sequences/s ({ct})", f"{sps:.0f}/s",
                     verdict(sps >= BATCH64_PER_S)))
        t = torch_types.get(ct, {}).get("batch64", {}).get("sequences_per_s")
        if t:
            rows.append((f"engine batch 64 >= {TORCH_RATIO}x PyTorch ({ct}, same GPU, same run)",
                         f"{sps:.0f} / {t:.0f} = {sps / t:.1f}x", verdict(sps >= TORCH_RATIO * t)))
        elif ct != "float32":
            rows.append((f"engine batch 64 >= {TORCH_RATIO}x PyTorch ({ct})",
                         torch.get("skipped") or why("torch_bench"), ""))
    for ct, r in torch_types.items():
        rows.append((f"PyTorch {torch.get('torch')} / transformers {torch.get('transformers')} "
                     f"({ct}), for reference",
                     f"batch-1 generate {r['batch1']['median_ms']} ms; batch 64 "
                     f"{r['batch64']['sequences_per_s']}/s", ""))
    return rows


def pipeline_rows(pipe, why):
    rows = []
    if not pipe:
        rows.append((f"pipeline p50 <= {PIPE_P50_MS} ms and p99 <= {PIPE_P99_MS} ms at "
                     "concurrency 1", why("pipeline"), ""))
        rows.append((f"pipeline: highest rate with p99 < 50 ms >= {PIPE_RATE_PER_S:,}/s",
                     why("pipeline"), ""))
    for c in (pipe or {}).get("configurations", []):
        name = ", ".join(f"{k}={v}" for k, v in c["config"].items())
        one = next((lv for lv in c["levels"] if lv.get("concurrency") == 1), None)
        if one:
            p50, p99 = one["p50_us"] / 1000, one["p99_us"] / 1000
            rows.append((f"pipeline p50 <= {PIPE_P50_MS} ms, p99 <= {PIPE_P99_MS} ms at "
                         f"concurrency 1 ({name})",
                         f"p50 {p50:.2f} ms, p99 {p99:.2f} ms ({one['errors']} errors)",
                         verdict(p50 <= PIPE_P50_MS and p99 <= PIPE_P99_MS and
                                 one["errors"] == 0)))
        bar = f"pipeline: highest rate with p99 < 50 ms >= {PIPE_RATE_PER_S:,}/s ({name})"
        best = c.get("best_level")
        if best is not None:
            lv = c["levels"][best]
            rows.append((bar, f"{lv['throughput_per_s']:.0f} requests/s at concurrency "
                         f"{lv['concurrency']} (p99 {lv['p99_us'] / 1000:.2f} ms)",
                         verdict(lv["throughput_per_s"] >= PIPE_RATE_PER_S)))
        else:
            rows.append((bar, "no level met it", verdict(False)))
    return rows


def main():
    work, out_dir = sys.argv[1], sys.argv[2]
    steps = step_status(work)

    def why(step):
        s = steps.get(step)
        return f"not measured: {step} {s}" if s else f"not measured: {step} has not run"

    num = load_json(os.path.join(out_dir, "numerics.json")) or {}
    torch = load_json(os.path.join(out_dir, "torch_t5.json")) or {}
    pipe = load_json(os.path.join(out_dir, "pipeline.json"))
    rows = (numerics_rows(num, why) + speed_rows(engine_bench(work), torch, why) +
            pipeline_rows(pipe, why))

    print("## Bars")
    print()
    print("| bar | measured | |")
    print("|---|---|---|")
    for bar, measured, v in rows:
        print(f"| {bar} | {measured} | {v} |")
    tables = profile_tables(work)
    print()
    print("## Where the time goes (engine_bench --profile: per op, per kernel)")
    print()
    if tables:
        print("```")
        print(tables.rstrip())
        print("```")
    else:
        print(why("profile"))


if __name__ == "__main__":
    main()
