#!/usr/bin/env python3
"""Soak: the whole pipeline at a steady fraction of its measured capacity for a long time.

Starts `seqpipe up` on a model in a private run dir (by default the bundled speller as served:
models/speller-t5 with its seqpipe.yaml under config/demo.yaml, the engine in int8, response cache
off, 2 beams a request), measures the pipeline's capacity (the highest throughput of a
closed-loop seqpipe-bench concurrency sweep with no errors), then offers --load-fraction of it
open-loop for --minutes. Every --sample-s it records every process's RSS; it prints the RSS of
each process over time, its growth, and the slope of a least-squares line through the second half
of the samples (the first half is warm-up: caches, allocator arenas), and the requests, errors and
p99 of every window. Exit status 1 when a request failed, a process died or was restarted, a
process's RSS slope over the second half exceeded --max-rss-slope-mib-per-min, or (with
--max-rss-growth-mib) its RSS grew by more than that; 2 on bad usage.

  bench/soak.py --minutes 10 --json soak.json          # the speller as served, 10 minutes
  bench/soak.py --model tiny --minutes 10              # a t5-tiny-shaped random model instead
  bench/soak.py --seconds 60 --load-fraction 0.5 --max-rss-growth-mib 16 \
      --max-rss-slope-mib-per-min 8                    # ctest's bench.soak

The binaries come from --build (default build/release). Python: Debian's python3 only.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from proc_rss import rss_by_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPELLER = os.path.join(ROOT, "models", "speller-t5")
DEMO_CONFIG = os.path.join(ROOT, "config", "demo.yaml")
MIB = 2**20


def bench(args, endpoint, extra, timeout):
    """Runs seqpipe-bench against `endpoint`; returns its JSON report."""
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        cmd = [os.path.join(args.build, "bench", "seqpipe-bench"), "--endpoint", endpoint,
               "--max-new-tokens", str(args.max_new_tokens), "--num-beams", str(args.num_beams),
               "--timeout-ms", "5000", "--no-progress", "--json", report.name, *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode not in (0, 1):  # 1: the run had errors, still reported
            sys.exit(f"soak: seqpipe-bench failed ({proc.returncode}): {proc.stderr.strip()}")
        with open(report.name) as f:
            return json.load(f)


def pipeline_rss(run_dir):
    """{pid: (program, RSS bytes)} of the pipeline's processes: those naming its run dir, but the
    load generator (its endpoint names the run dir too)."""
    return {pid: v for pid, v in rss_by_process(run_dir).items() if v[0] != "seqpipe-bench"}


class RssSampler(threading.Thread):
    """Every `period` seconds, every pipeline process's RSS: samples [(seconds, {pid: (program,
    bytes)})], the first at start."""

    def __init__(self, marker, period):
        super().__init__(daemon=True)
        self.marker, self.period = marker, period
        self.samples = []
        self.stopped = threading.Event()
        self.start_time = time.monotonic()

    def run(self):
        while True:
            self.samples.append((time.monotonic() - self.start_time, pipeline_rss(self.marker)))
            if self.stopped.wait(self.period):
                break
        self.samples.append((time.monotonic() - self.start_time, pipeline_rss(self.marker)))

    def stop(self):
        self.stopped.set()
        self.join()


def slope_per_min(points):
    """The least-squares slope of [(seconds, bytes)], in MiB per minute (0 for fewer than 2)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mr = sum(r for _, r in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mt) * (r - mr) for t, r in points) / var * 60 / MIB


def rss_report(args, samples):
    """Prints each process's RSS over time and its figures; returns (processes, failures)."""
    first, last = samples[0][1], samples[-1][1]
    pids = sorted(first, key=lambda pid: (first[pid][0], pid))
    every = max(1, len(samples) // 12)  # about a dozen rows
    rows = samples[::every] + ([samples[-1]] if (len(samples) - 1) % every else [])
    names = [f"{first[pid][0].removeprefix('seqpipe-')}:{pid}" for pid in pids]
    print("\nRSS MiB over time (a process's column ends where it died)")
    print(f"{'min':>6}" + "".join(f"{n:>22}" for n in names))
    for t, rss in rows:
        print(f"{t / 60:>6.1f}" + "".join(
            f"{rss[pid][1] / MIB:>22.1f}" if pid in rss else f"{'-':>22}" for pid in pids))
    processes, failures = [], []
    print(f"\n{'process':<24}{'pid':>8}{'start MiB':>11}{'end MiB':>9}{'growth':>8}"
          f"{'slope, 2nd half MiB/min':>25}")
    for pid in pids:
        program = first[pid][0]
        series = [(t, rss[pid][1]) for t, rss in samples if pid in rss]
        second_half = [p for p in series if p[0] >= samples[-1][0] / 2]
        slope = slope_per_min(second_half)
        end = last.get(pid, (program, None))[1]
        growth = None if end is None else (end - first[pid][1]) / MIB
        print(f"{program:<24}{pid:>8}{first[pid][1] / MIB:>11.1f}"
              + (f"{end / MIB:>9.1f}{growth:>8.1f}" if end is not None else f"{'gone':>9}{'':>8}")
              + f"{slope:>25.2f}")
        processes.append({"program": program, "pid": pid, "rss_start_bytes": first[pid][1],
                          "rss_end_bytes": end, "slope_mib_per_min": slope,
                          "rss_bytes": [[round(t, 1), r] for t, r in series]})
        if end is None:
            failures.append(f"{program} (pid {pid}) died during the soak")
            continue
        if slope > args.max_rss_slope_mib_per_min:
            failures.append(f"{program} (pid {pid}) RSS grew {slope:.2f} MiB/min over the second "
                            f"half (bound {args.max_rss_slope_mib_per_min})")
        if args.max_rss_growth_mib is not None and growth > args.max_rss_growth_mib:
            failures.append(f"{program} (pid {pid}) RSS grew {growth:.1f} MiB "
                            f"(bound {args.max_rss_growth_mib} MiB)")
    for pid in sorted(set(last) - set(first)):
        failures.append(f"{last[pid][0]} (pid {pid}) was started during the soak (a restart)")
    return processes, failures


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "release"),
                   help="the build tree with tools/seqpipe and bench/seqpipe-bench (default %(default)s)")
    p.add_argument("--model", default=SPELLER,
                   help="model directory (default: the bundled speller), or 'tiny': a random "
                        "t5-tiny-shaped model made by seqpipe-mkmodel")
    p.add_argument("--config", help="pipeline config (default: config/demo.yaml for the speller, "
                                    "the built-in defaults otherwise)")
    duration = p.add_mutually_exclusive_group()
    duration.add_argument("--minutes", type=float, default=10, help="soak length (default 10)")
    duration.add_argument("--seconds", type=float, help="soak length in seconds instead")
    p.add_argument("--load-fraction", type=float, default=0.7,
                   help="the offered rate as a fraction of the measured capacity (default 0.7)")
    p.add_argument("--max-new-tokens", type=int, help="per request (default 64; 12 for 'tiny')")
    p.add_argument("--num-beams", type=int, help="per request (default 2 as scripts/run.sh sends; "
                                                 "1 for 'tiny')")
    p.add_argument("--window-s", type=float, help="report window (default 60, or a sixth of a shorter soak)")
    p.add_argument("--sample-s", type=float,
                   help="RSS sampling period (default 10, or a thirtieth of a shorter soak)")
    p.add_argument("--max-rss-slope-mib-per-min", type=float, default=2.0,
                   help="fail when a process's RSS grew faster than this over the second half "
                        "(least-squares slope; default %(default)s)")
    p.add_argument("--max-rss-growth-mib", type=float,
                   help="fail when a process's RSS grew by more than this during the soak")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra `seqpipe up --set` overrides (repeatable)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    args.seconds = args.seconds if args.seconds is not None else args.minutes * 60
    if args.seconds <= 0 or not 0 < args.load_fraction <= 1:
        p.error("the soak length must be > 0 and --load-fraction in (0, 1]")
    tiny = args.model == "tiny"
    if args.config is None and os.path.realpath(args.model) == os.path.realpath(SPELLER):
        args.config = DEMO_CONFIG
    args.max_new_tokens = args.max_new_tokens or (12 if tiny else 64)
    args.num_beams = args.num_beams or (1 if tiny else 2)
    args.window_s = args.window_s or min(60.0, args.seconds / 6)
    args.sample_s = args.sample_s or min(10.0, args.seconds / 30)
    return args


def start_pipeline(args, tmp, run_dir):
    """`seqpipe up` on the model, in its own session; returns (process, log file)."""
    model = args.model
    if model == "tiny":
        model = os.path.join(tmp, "model")
        subprocess.run([os.path.join(args.build, "tools", "seqpipe-mkmodel"), "--preset", "tiny",
                        "--spiece", "--gated", "--untied", "--seed", "3", "--out", model],
                       check=True, capture_output=True, timeout=120)
    up_cmd = [os.path.join(args.build, "tools", "seqpipe"), "up"]
    if args.config:
        up_cmd += ["--config", args.config]
    for s in [f"model.dir={model}", f"runtime_dir={run_dir}",
              "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock", "gateway.cache_bytes=0",
              "gateway.http_endpoint=127.0.0.1:0",
              *[f"{stage}.metrics_port=0" for stage in
                ("gateway", "batcher", "tokenizer", "encoder", "decoder", "postprocessor")],
              *args.set]:
        up_cmd += ["--set", s]
    log = open(os.path.join(tmp, "up.log"), "w")
    print("soak:", " ".join(up_cmd))
    return subprocess.Popen(up_cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True), log


def soak(args, run_dir, up, log):
    """Waits for the pipeline, measures its capacity, soaks it; returns (figures, failures)."""
    endpoint = f"ipc://{run_dir}/gateway.sock"
    send = [os.path.join(args.build, "tools", "seqpipe"), "send", "--endpoint", endpoint,
            "--timeout-ms", "2000", "warm up"]
    deadline = time.monotonic() + 90
    while subprocess.run(send, capture_output=True).returncode != 0:
        if up.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"soak: the pipeline did not come up; see {log.name}")
        time.sleep(0.3)
    capacity_run = bench(args, endpoint,
                         ["--concurrency-range", "1:16", "--duration", "3", "--min-gain", "-1"],
                         timeout=300)
    capacity = max((s["throughput_per_s"] for s in capacity_run["steps"] if s["errors"] == 0),
                   default=0)
    if capacity <= 0:
        sys.exit("soak: no concurrency level ran without errors; no capacity to soak at")
    rate = args.load_fraction * capacity
    print(f"capacity {capacity:.1f} req/s (closed-loop sweep 1..16); soaking at "
          f"{rate:.1f} req/s ({args.load_fraction:.0%}) for {args.seconds:.0f} s")
    sys.stdout.flush()
    sampler = RssSampler(run_dir, args.sample_s)
    sampler.start()
    try:
        run = bench(args, endpoint, ["--request-rate", f"{rate:.3f}", "--duration",
                                     str(args.seconds), "--window-s", str(args.window_s)],
                    timeout=args.seconds + 120)
    finally:
        sampler.stop()
    processes, failures = rss_report(args, sampler.samples)
    print(f"\n{'window':<12}{'requests':>10}{'ok':>8}{'errors':>8}{'p99 ms':>10}")
    for w in run["windows"]:
        print(f"{w['label']:<12}{w['requests']:>10}{w['ok']:>8}{w['errors']:>8}"
              f"{w['latency_us']['p99'] / 1e3:>10.2f}")
    overall = run["overall"]
    print(f"{'overall':<12}{overall['requests']:>10}{overall['ok']:>8}{overall['errors']:>8}"
          f"{overall['latency_us']['p99'] / 1e3:>10.2f}  {overall['throughput_per_s']:.1f} ok/s")
    if overall["errors"] > 0:
        failures.append(f"{overall['errors']} requests failed: {overall['errors_by_code']}")
    figures = {"model": args.model, "config": args.config, "capacity_per_s": capacity,
               "rate_per_s": rate, "seconds": args.seconds, "processes": processes,
               "windows": run["windows"], "overall": overall, "failures": failures}
    return figures, failures


def main():
    args = parse_args()
    tmp = tempfile.mkdtemp(prefix="seqpipe-soak-")
    run_dir = os.path.join(tmp, "run")
    up, log = start_pipeline(args, tmp, run_dir)
    try:
        figures, failures = soak(args, run_dir, up, log)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(figures, f, indent=2)
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    print("soak:", "failed" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
