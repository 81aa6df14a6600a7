#!/usr/bin/env python3
"""Soak: the whole pipeline at a steady fraction of its measured capacity for a long time.

Starts `seqpipe up` on a model in a private run dir, measures the pipeline's capacity (the
highest throughput of a closed-loop seqpipe-bench concurrency sweep with no errors), then offers
--load-fraction of it open-loop for --minutes, and prints every process's RSS at the start and the
end of that run, and the requests, errors and p99 of every minute (window). Exit status 1 when a
request failed, a process died or was restarted, or (with --max-rss-growth-mib) a process's RSS
grew by more than that; 2 on bad usage.

  bench/soak.py --minutes 10                         # the soak (t5-tiny-shaped random model)
  bench/soak.py --model models/speller-t5 --minutes 10 --json soak.json
  bench/soak.py --seconds 60 --max-rss-growth-mib 16   # what ctest's bench.soak runs

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
import time

from proc_rss import rss_by_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(args, build, endpoint, extra, timeout):
    """Runs seqpipe-bench against `endpoint`; returns its JSON report."""
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        cmd = [os.path.join(build, "bench", "seqpipe-bench"), "--endpoint", endpoint,
               "--max-new-tokens", str(args.max_new_tokens), "--timeout-ms", "5000",
               "--no-progress", "--json", report.name, *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode not in (0, 1):  # 1: the run had errors, still reported
            sys.exit(f"soak: seqpipe-bench failed ({proc.returncode}): {proc.stderr.strip()}")
        with open(report.name) as f:
            return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "release"),
                   help="the build tree with tools/seqpipe and bench/seqpipe-bench (default %(default)s)")
    p.add_argument("--model", help="model directory (default: a tiny random model made by seqpipe-mkmodel)")
    duration = p.add_mutually_exclusive_group()
    duration.add_argument("--minutes", type=float, default=10, help="soak length (default 10)")
    duration.add_argument("--seconds", type=float, help="soak length in seconds instead")
    p.add_argument("--load-fraction", type=float, default=0.7,
                   help="the offered rate as a fraction of the measured capacity (default 0.7)")
    p.add_argument("--max-new-tokens", type=int, default=12, help="per request (default 12)")
    p.add_argument("--window-s", type=float, help="report window (default 60, or a sixth of a shorter soak)")
    p.add_argument("--max-rss-growth-mib", type=float,
                   help="fail when a process's RSS grew by more than this during the soak")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra `seqpipe up --set` overrides (repeatable)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    seconds = args.seconds if args.seconds is not None else args.minutes * 60
    if seconds <= 0 or not 0 < args.load_fraction <= 1:
        p.error("the soak length must be > 0 and --load-fraction in (0, 1]")
    window_s = args.window_s or min(60.0, seconds / 6)

    tmp = tempfile.mkdtemp(prefix="seqpipe-soak-")
    run_dir = os.path.join(tmp, "run")
    endpoint = f"ipc://{run_dir}/gateway.sock"
    model = args.model
    if model is None:
        model = os.path.join(tmp, "model")
        subprocess.run([os.path.join(args.build, "tools", "seqpipe-mkmodel"), "--preset", "tiny",
                        "--spiece", "--gated", "--untied", "--seed", "3", "--out", model],
                       check=True, capture_output=True, timeout=120)
    up_cmd = [os.path.join(args.build, "tools", "seqpipe"), "up"]
    for s in [f"model.dir={model}", f"runtime_dir={run_dir}",
              "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock", "gateway.cache_bytes=0",
              "gateway.http_endpoint=127.0.0.1:0",
              *[f"{stage}.metrics_port=0" for stage in
                ("gateway", "batcher", "tokenizer", "encoder", "decoder", "postprocessor")],
              *args.set]:
        up_cmd += ["--set", s]
    log = open(os.path.join(tmp, "up.log"), "w")
    up = subprocess.Popen(up_cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    failures = []
    try:
        send = [os.path.join(args.build, "tools", "seqpipe"), "send", "--endpoint", endpoint,
                "--timeout-ms", "2000", "warm up"]
        deadline = time.monotonic() + 90
        while subprocess.run(send, capture_output=True).returncode != 0:
            if up.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"soak: the pipeline did not come up; see {log.name}")
            time.sleep(0.3)

        capacity_run = bench(args, args.build, endpoint,
                             ["--concurrency-range", "1:16", "--duration", "3", "--min-gain", "-1"],
                             timeout=300)
        capacity = max((s["throughput_per_s"] for s in capacity_run["steps"] if s["errors"] == 0),
                       default=0)
        if capacity <= 0:
            sys.exit("soak: no concurrency level ran without errors; no capacity to soak at")
        rate = args.load_fraction * capacity
        print(f"capacity {capacity:.1f} req/s (closed-loop sweep 1..16); soaking at "
              f"{rate:.1f} req/s ({args.load_fraction:.0%}) for {seconds:.0f} s")
        sys.stdout.flush()

        before = rss_by_process(run_dir)
        soak = bench(args, args.build, endpoint,
                     ["--request-rate", f"{rate:.3f}", "--duration", str(seconds),
                      "--window-s", str(window_s)], timeout=seconds + 120)
        after = rss_by_process(run_dir)

        print(f"\n{'process':<24}{'pid':>8}{'RSS start MiB':>15}{'RSS end MiB':>13}{'growth MiB':>12}")
        processes = []
        for pid, (program, rss) in sorted(before.items(), key=lambda kv: kv[1][0]):
            end = after.get(pid, (program, None))[1]
            growth = None if end is None else (end - rss) / 2**20
            print(f"{program:<24}{pid:>8}{rss / 2**20:>15.1f}"
                  + (f"{end / 2**20:>13.1f}{growth:>12.1f}" if end is not None else f"{'gone':>13}{'':>12}"))
            processes.append({"program": program, "pid": pid, "rss_start_bytes": rss, "rss_end_bytes": end})
            if end is None:
                failures.append(f"{program} (pid {pid}) died during the soak")
            elif args.max_rss_growth_mib is not None and growth > args.max_rss_growth_mib:
                failures.append(f"{program} (pid {pid}) RSS grew {growth:.1f} MiB "
                                f"(bound {args.max_rss_growth_mib} MiB)")
        for pid in sorted(set(after) - set(before)):
            failures.append(f"{after[pid][0]} (pid {pid}) was started during the soak (a restart)")

        print(f"\n{'window':<12}{'requests':>10}{'ok':>8}{'errors':>8}{'p99 ms':>10}")
        for w in soak["windows"]:
            print(f"{w['label']:<12}{w['requests']:>10}{w['ok']:>8}{w['errors']:>8}"
                  f"{w['latency_us']['p99'] / 1e3:>10.2f}")
        overall = soak["overall"]
        print(f"{'overall':<12}{overall['requests']:>10}{overall['ok']:>8}{overall['errors']:>8}"
              f"{overall['latency_us']['p99'] / 1e3:>10.2f}  {overall['throughput_per_s']:.1f} ok/s")
        if overall["errors"] > 0:
            failures.append(f"{overall['errors']} requests failed: {overall['errors_by_code']}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"capacity_per_s": capacity, "rate_per_s": rate, "seconds": seconds,
                           "processes": processes, "windows": soak["windows"], "overall": overall,
                           "failures": failures}, f, indent=2)
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
