#!/usr/bin/env python3
"""HTTP front door under bad clients: normal POST /v1/generate traffic while --slow clients send
their headers a byte a second and --idle sockets send nothing (reconnecting when the server
closes them, as an attacker would), against the same traffic without them; then the gateway's
RSS during a chunked upload attempt of --upload-mib. The bad clients run in a process of their own.

Starts `seqpipe up` on a tiny random model (seqpipe-mkmodel) in a private run dir. Phases
alternate quiet and loaded (--rounds pairs, then quiet), each --seconds long, so a drift of the
shared machine shows; it prints each phase's requests and latency percentiles, then the median
loaded phase's p99 over the median quiet phase's (the bar: within 2x), then the gateway's RSS
before and at most during the upload (the bar: under 100 MB) and how much of the upload was sent
before the refusal.

  bench/http_hardening.py                       # 50 slow, 50 idle, 1 GiB upload attempt
  bench/http_hardening.py --seconds 5 --slow 8 --idle 16

Exit status 1 when a bar is missed or a normal request failed. Python: Debian's python3 only.
"""
import argparse
import http.client
import json
import multiprocessing
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from proc_rss import rss_by_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gateway_rss(run_dir):
    """The RSS in bytes of the seqpipe-gateway whose command line names `run_dir`."""
    return rss_by_program(run_dir, ("seqpipe-gateway",)).get("seqpipe-gateway", 0)


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def normal_traffic(port, seconds, clients=2):
    """Latencies (s) of POST /v1/generate from `clients` keep-alive connections for `seconds`,
    and the number of failures."""
    latencies, failures, lock = [], [0], threading.Lock()
    body = json.dumps({"text": "teh speling is bad", "params": {"max_new_tokens": 8}})
    until = time.monotonic() + seconds

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < until:
            started = time.monotonic()
            try:
                conn.request("POST", "/v1/generate", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                ok = response.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            with lock:
                if ok:
                    latencies.append(time.monotonic() - started)
                else:
                    failures[0] += 1
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, failures[0]


class BadClients:
    """`slow` connections sending headers a byte a second and `idle` ones sending nothing, each
    reopened when the server closes it, until stopped."""

    def __init__(self, port, slow, idle):
        self.port, self.stop = port, threading.Event()
        self.slow = [self.connect() for _ in range(slow)]
        self.idle = [self.connect() for _ in range(idle)]
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.port))
        s.setblocking(False)
        return [s, 0]  # the socket, the bytes of the head it has sent

    def reopen_closed(self, group):
        for entry in group:
            if select.select([entry[0]], [], [], 0)[0]:  # an answer or the close: start over
                entry[0].close()
                entry[:] = self.connect()

    def run(self):
        head = b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 8192
        while not self.stop.wait(1):
            self.reopen_closed(self.idle)
            self.reopen_closed(self.slow)
            for entry in self.slow:
                try:
                    entry[0].send(head[entry[1] % len(head):][:1])
                    entry[1] += 1
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.thread.join()
        for s, _ in self.slow + self.idle:
            s.close()


def bad_clients_process(port, slow, idle, stop):
    bad = BadClients(port, slow, idle)
    stop.wait()
    bad.close()


def start_bad_clients(port, slow, idle):
    """BadClients in a process of their own, so they take no time from the normal clients'
    interpreter; returns (the event that stops them, the process)."""
    stop = multiprocessing.Event()
    proc = multiprocessing.Process(target=bad_clients_process, args=(port, slow, idle, stop))
    proc.start()
    time.sleep(0.5)  # connected before the measured traffic starts
    return stop, proc


def upload_attempt(port, run_dir, total):
    """Streams `total` bytes as a chunked POST until the server answers; returns (status line,
    bytes sent, the gateway's RSS before, its highest RSS meanwhile)."""
    before = gateway_rss(run_dir)
    peak, done = [before], threading.Event()

    def sample():
        while not done.wait(0.02):
            peak[0] = max(peak[0], gateway_rss(run_dir))

    sampler = threading.Thread(target=sample)
    sampler.start()
    chunk = 256 << 10
    piece = f"{chunk:x}\r\n".encode() + b"x" * chunk + b"\r\n"
    sent, line = 0, b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            while sent < total and not select.select([s], [], [], 0)[0]:
                s.sendall(piece)
                sent += chunk
        except OSError:
            pass
        try:
            line = s.recv(4096).split(b"\r\n")[0]
        except OSError:
            pass
    time.sleep(0.5)
    done.set()
    sampler.join()
    return line.decode(errors="replace"), sent, before, peak[0]


def start_pipeline(build, tmp, port):
    model = os.path.join(tmp, "model")
    subprocess.run([os.path.join(build, "tools", "seqpipe-mkmodel"), "--preset", "tiny",
                    "--spiece", "--gated", "--untied", "--seed", "3", "--out", model],
                   check=True, capture_output=True, timeout=120)
    run_dir = os.path.join(tmp, "run")
    up = [os.path.join(build, "tools", "seqpipe"), "up"]
    for s in [f"model.dir={model}", f"runtime_dir={run_dir}", "gateway.cache_bytes=0",
              "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock",
              f"gateway.http_endpoint=127.0.0.1:{port}",
              *[f"{stage}.metrics_port=0" for stage in
                ("gateway", "batcher", "tokenizer", "encoder", "decoder", "postprocessor")]]:
        up += ["--set", s]
    log = open(os.path.join(tmp, "up.log"), "w")
    proc = subprocess.Popen(up, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while True:
        latencies, _ = normal_traffic(port, 0.01, clients=1)
        if latencies:
            return proc, run_dir
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"http_hardening: the pipeline did not come up; see {log.name}")
        time.sleep(0.3)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    p.add_argument("--seconds", type=float, default=10, help="length of each traffic phase")
    p.add_argument("--rounds", type=int, default=3, help="quiet+loaded phase pairs (then quiet)")
    p.add_argument("--slow", type=int, default=50)
    p.add_argument("--idle", type=int, default=50)
    p.add_argument("--upload-mib", type=int, default=1024)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="seqpipe-http-hardening-")
    port = free_port()
    proc, run_dir = start_pipeline(args.build, tmp, port)
    failed = False
    try:
        normal_traffic(port, 2)  # warm up
        p99 = {"quiet": [], "loaded": []}
        for phase in ["quiet", "loaded"] * args.rounds + ["quiet"]:
            bad = start_bad_clients(port, args.slow, args.idle) if phase == "loaded" else None
            latencies, failures = normal_traffic(port, args.seconds)
            if bad:
                bad[0].set()
                bad[1].join()
            p99[phase].append(percentile(latencies, 0.99))
            failed |= failures > 0
            print(f"{phase:6} ({args.slow if bad else 0} slow, {args.idle if bad else 0} idle): "
                  f"{len(latencies)} requests, {failures} failed, "
                  f"p50 {percentile(latencies, 0.5) * 1e3:.2f} ms, "
                  f"p99 {percentile(latencies, 0.99) * 1e3:.2f} ms")
            sys.stdout.flush()
        quiet = sorted(p99["quiet"])[len(p99["quiet"]) // 2]
        loaded = sorted(p99["loaded"])[len(p99["loaded"]) // 2]
        ratio = loaded / quiet
        print(f"p99 loaded / quiet, median of the phases: {loaded * 1e3:.2f} / {quiet * 1e3:.2f} ms "
              f"= {ratio:.2f}x (bar: 2x); worst loaded phase {max(p99['loaded']) * 1e3:.2f} ms, "
              f"worst quiet phase {max(p99['quiet']) * 1e3:.2f} ms")
        failed |= ratio > 2
        line, sent, before, peak = upload_attempt(port, run_dir, args.upload_mib << 20)
        print(f"chunked upload of {args.upload_mib} MiB: answered '{line}' after "
              f"{sent / (1 << 20):.1f} MiB sent; gateway RSS {before / 1e6:.1f} MB before, "
              f"{peak / 1e6:.1f} MB at most (bar: 100 MB)")
        failed |= peak > 100e6 or " 413 " not in line + " "
        latencies, failures = normal_traffic(port, 1)
        print(f"after: {len(latencies)} requests, {failures} failed")
        failed |= failures > 0 or not latencies
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
