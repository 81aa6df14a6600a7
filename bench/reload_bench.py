#!/usr/bin/env python3
"""Reload under load: p99 before a model version swap vs during it.

Makes a repository of two versions of one model (seqpipe-mkmodel, different seeds) or takes
--repository, starts `seqpipe up --repository` serving version 1 of --model only, measures the
pipeline's capacity (closed loop, --threads clients, --capacity-seconds), then offers
--load-fraction of it open loop (each request has its scheduled send time; latency counts from
then, so a stall is not hidden by the client waiting) and, after --before-seconds, reloads to
version 2 and back to 1, each swap followed by --settle-seconds. It prints
p50/p99 of the requests scheduled before the first swap and of those scheduled while a swap ran,
their ratio, the errors and the requests never answered, and the pids of the unloaded versions
still alive (none expected); with --cycles N, N more reloads (to 2 and back) with no traffic and
the gateway's and batcher's RSS before and after them. Exit status 1 when a request failed or went unanswered, or an
unloaded version's process was left. With --poll-ms N the pipeline runs in poll mode
(model.repository_poll_ms=N) and each swap is a change of the repository instead: version 2 is
renamed into it, later renamed out of it; a swap lasts until the new version is READY and the old
one UNAVAILABLE. The bench loads and checks over the gateway's HTTP (the KServe repository
extension: POST .../models/NAME/load, POST /v2/repository/index) from its own process: a `seqpipe
models` process for each showed its own start in the serving version's latency on 2 cores.

  PYTHONPATH=clients/python bench/reload_bench.py                 # tiny random models
  PYTHONPATH=clients/python bench/reload_bench.py --load-fraction 0.5 --before-seconds 20
  PYTHONPATH=clients/python bench/reload_bench.py --cycles 20       # and the hubs' RSS
  PYTHONPATH=clients/python bench/reload_bench.py --poll-ms 200     # swaps by the repository

The binaries come from --build (default build/release). Python: Debian's python3 only.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
from seqpipe_client import Client, SeqpipeError  # noqa: E402
from proc_rss import rss_by_program  # noqa: E402

TEXTS = [f"the {w} is here" for w in ("cat", "dog", "house", "tree", "river", "stone")]


def hub_rss(run_dir):
    """{program: RSS bytes} of the gateway and batcher whose command line names `run_dir`."""
    return rss_by_program(run_dir, ("seqpipe-gateway", "seqpipe-batcher"))


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def pids_of(model_dir):
    out = subprocess.run(["pgrep", "-f", f"model.dir={model_dir}( |$)"], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


class Load:
    """`threads` clients; closed loop (rate None) or open loop at `rate` requests/s in all."""

    def __init__(self, endpoint, model, threads, rate, max_new_tokens):
        self.records = []  # (scheduled, finished, error or None)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.args = (endpoint, model, threads, rate, max_new_tokens)
        self.workers = [threading.Thread(target=self.run, args=(k,)) for k in range(threads)]
        self.started = time.monotonic()
        for w in self.workers:
            w.start()

    def run(self, k):
        endpoint, model, threads, rate, max_new_tokens = self.args
        client = Client(endpoint, timeout_ms=30000)
        n = 0
        try:
            while not self.stopping.is_set():
                scheduled = time.monotonic()
                if rate:
                    scheduled = self.started + (n * threads + k) / rate
                    time.sleep(max(0.0, scheduled - time.monotonic()))
                error = None
                try:
                    client.generate(TEXTS[n % len(TEXTS)], max_new_tokens=max_new_tokens,
                                    model=model)
                except SeqpipeError as e:
                    error = f"{e.code}: {e}"
                with self.lock:
                    self.records.append((scheduled, time.monotonic(), error))
                n += 1
        finally:
            client.close()

    def stop(self):
        self.stopping.set()
        for w in self.workers:
            w.join(timeout=60)
        return self.records


def load_version(http_port, model, version):
    """The KServe repository extension's load of `version` (a reload: the others are unloaded);
    returns when it is done."""
    body = json.dumps({"parameters": {"version": version}}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/v2/repository/models/{model}/load", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=300) as reply:
        reply.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def states(http_port):
    """{(name, version): state} from the gateway's KServe repository index."""
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}/v2/repository/index",
                                     data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return {(m["name"], m["version"]): m["state"] for m in json.load(reply)}


def swap(a, http_port, version, old, dirs, staged):
    """Reloads a.model to `version`: an HTTP load, or in poll mode version 2 renamed into
    the repository (a rename: never seen half-copied) or out of it, then waits until `version` is
    READY and `old` UNAVAILABLE."""
    if not a.poll_ms:
        return load_version(http_port, a.model, version)
    if version == "2":
        os.rename(staged, dirs["2"])
    else:
        os.rename(dirs["2"], staged)
    deadline = time.monotonic() + 300
    while True:
        now = states(http_port)
        if now.get((a.model, version)) == "READY" and now.get((a.model, old)) == "UNAVAILABLE":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"poll mode: no swap to {a.model}/{version} in 300 s: {now}")
        time.sleep(0.1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    p.add_argument("--config", default=os.path.join(ROOT, "config", "pipeline.yaml"),
                   help="the pipeline config seqpipe up reads (default: the shipped one, as a "
                        "deployment has one; the gateway loads it again for each version routed)")
    p.add_argument("--repository", help="a repository whose --model has versions 1 and 2")
    p.add_argument("--model", default="alpha")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--load-fraction", type=float, default=0.5)
    p.add_argument("--capacity-seconds", type=float, default=8)
    p.add_argument("--before-seconds", type=float, default=15)
    p.add_argument("--settle-seconds", type=float, default=5)
    p.add_argument("--cycles", type=int, default=0,
                   help="then N more reloads (2, then 1), idle, with the hubs' RSS before and after")
    p.add_argument("--poll-ms", type=int, default=0,
                   help="poll mode: swap by renaming version 2 into and out of the repository")
    p.add_argument("--json", help="write every request (scheduled, finished, error) and the swaps")
    p.add_argument("--set", action="append", default=[], help="more --set for seqpipe up")
    a = p.parse_args()
    seqpipe = os.path.join(a.build, "tools", "seqpipe")
    tmp = tempfile.mkdtemp(prefix="seqpipe-reload-bench-")
    repo = a.repository or os.path.join(tmp, "models")
    if not a.repository:
        for version, seed in (("1", 3), ("2", 11)):
            subprocess.run([os.path.join(a.build, "tools", "seqpipe-mkmodel"), "--preset", "tiny",
                            "--spiece", "--gated", "--untied", "--seed", str(seed),
                            "--out", os.path.join(repo, a.model, version)], check=True,
                           capture_output=True, timeout=120)
    dirs = {v: os.path.join(repo, a.model, v) for v in ("1", "2")}
    # Poll mode: version 2 while it is out of the repository, on the repository's file system.
    staged = os.path.join(os.path.dirname(os.path.abspath(repo)), f"staged-2-{os.getpid()}")
    if a.poll_ms:
        os.rename(dirs["2"], staged)
        a.set.append(f"model.repository_poll_ms={a.poll_ms}")
    run_dir = os.path.join(tmp, "run")
    endpoint = f"ipc://{run_dir}/gateway.sock"
    http_port = free_port()
    sets = [f"runtime_dir={run_dir}", "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock",
            f"gateway.http_endpoint=127.0.0.1:{http_port}", "gateway.metrics_port=0", "batcher.metrics_port=0",
            f"model.name={a.model}", f"model.dir={repo}", *a.set]
    up = [seqpipe, "up", "--config", a.config, "--repository", repo] + \
        [x for s in sets for x in ("--set", s)]
    log = open(os.path.join(tmp, "up.log"), "w")
    proc = subprocess.Popen(up, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    failed = False
    try:
        client = Client(endpoint, timeout_ms=30000)
        deadline = time.monotonic() + 120
        while True:
            try:
                client.generate("warm up", max_new_tokens=2, model=a.model)
                break
            except SeqpipeError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the pipeline did not come up; see " + log.name)
                time.sleep(0.3)
        client.close()
        if not a.poll_ms:
            load_version(http_port, a.model, "1")  # version 1 alone
        closed = Load(endpoint, a.model, a.threads, None, a.max_new_tokens)
        time.sleep(a.capacity_seconds)
        capacity = len(closed.stop()) / a.capacity_seconds
        rate = capacity * a.load_fraction
        print(f"capacity {capacity:.1f} req/s (closed loop, {a.threads} clients); offering "
              f"{rate:.1f} req/s ({a.load_fraction:.0%})")
        load = Load(endpoint, a.model, a.threads, rate, a.max_new_tokens)
        time.sleep(a.before_seconds)
        swaps = []
        for version, old in (("2", "1"), ("1", "2")):
            start = time.monotonic()
            swap(a, http_port, version, old, dirs, staged)
            end = time.monotonic()
            swaps.append((start, end))
            left = pids_of(dirs[old])
            print(f"swap to {a.model}/{version}: {end - start:.2f} s; processes of "
                  f"{a.model}/{old} left: {left or 'none'}")
            failed = failed or bool(left)
            time.sleep(a.settle_seconds)
        records = load.stop()
        before = [f - s for s, f, e in records if s < swaps[0][0] and s > load.started + 1]
        during = [f - s for s, f, e in records if any(b <= s <= e for b, e in swaps)]
        errors = [e for _, _, e in records if e]
        # A client call returns a reply or raises (no reply by the deadline is an error too), and
        # each thread sends its next request after the last one's answer: every request sent is
        # in `records`, answered or failed. Unanswered: the failures with no reply at all.
        lost = sum(1 for e in errors if e.startswith(("unavailable", "deadline_exceeded")))
        p99_before, p99_during = percentile(before, 0.99), percentile(during, 0.99)
        print(f"before the swaps: {len(before)} requests, p50 {percentile(before, 0.5) * 1e3:.1f} ms, "
              f"p99 {p99_before * 1e3:.1f} ms")
        print(f"during the swaps: {len(during)} requests, p50 {percentile(during, 0.5) * 1e3:.1f} ms, "
              f"p99 {p99_during * 1e3:.1f} ms")
        print(f"p99 during / before: {p99_during / p99_before:.2f}x; requests {len(records)}, "
              f"errors {len(errors)}, unanswered {lost}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"swaps": swaps, "records": records, "started": load.started}, f)
        for e in errors[:5]:
            print(f"  error: {e}")
        failed = failed or bool(errors) or lost > 0
        if a.cycles:
            before_rss = hub_rss(run_dir)
            for _ in range(a.cycles):
                for version, old in (("2", "1"), ("1", "2")):
                    swap(a, http_port, version, old, dirs, staged)
            after_rss = hub_rss(run_dir)
            for program in sorted(before_rss):
                b, e = before_rss[program], after_rss.get(program, 0)
                print(f"{program} RSS over {a.cycles} reload cycles: {b / 2**20:.1f} -> "
                      f"{e / 2**20:.1f} MiB ({(e - b) / 2**20:+.1f})")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        if a.poll_ms and os.path.isdir(staged):
            os.rename(staged, dirs["2"])  # the repository as it was
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
