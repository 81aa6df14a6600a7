"""Faults, done for real: replicas killed (SIGKILL) and stopped (SIGSTOP) under a steady load,
and an open-loop overload at about twice the measured capacity.

`seqpipe up` starts 2 replicas of every worker stage with fast heartbeats (100 ms, liveness 3),
and `seqpipe up` restarts a killed child. Each test drives a steady load from one DEALER with
unique request ids and checks: every request is answered exactly once, with ok or `unavailable`,
never later than its deadline plus a small grace.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL (tests/e2e/harness.py).
"""
import collections
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import SEQPIPE, TWO_OF_EACH, Pipeline, free_port, scrape  # noqa: E402

TIMEOUT_MS = 6000
GRACE_S = 1.0
TEXTS = ["teh speling is bad", "hello world", "i cant beleive teh wether", "a b c d e f g"]


class Load:
    """Sends `count` requests at `rate` per second from one DEALER and collects every reply.
    `curve`: (server public, public, secret) keys for a CurveZMQ gateway, or None."""

    def __init__(self, endpoint, count, rate, max_new_tokens=8, curve=None):
        self.endpoint, self.count, self.rate, self.max_new_tokens = endpoint, count, rate, max_new_tokens
        self.curve = curve
        self.sent = {}                                  # id -> send time
        self.replies = collections.defaultdict(list)    # id -> [(status, code, receive time)]
        self.thread = threading.Thread(target=self._run, daemon=True)  # a failed test must not hang on it

    def start(self):
        self.thread.start()
        return self

    def join(self):
        self.thread.join(timeout=self.count / self.rate + TIMEOUT_MS / 1000 + 30)

    def _run(self):
        context = zmq.Context.instance()
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if self.curve:
            sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = self.curve
        sock.connect(self.endpoint)
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        start = time.monotonic()
        n = 0
        while True:
            now = time.monotonic()
            while n < self.count and now >= start + n / self.rate:
                rid = f"r{n}"
                request = {"v": 1, "id": rid, "text": f"{TEXTS[n % len(TEXTS)]} {n}", "timeout_ms": TIMEOUT_MS,
                           "params": {"max_new_tokens": self.max_new_tokens}}
                sock.send_multipart([b"", msgpack.packb(request)])
                self.sent[rid] = time.monotonic()
                n += 1
            last_deadline = max(self.sent.values(), default=now) + TIMEOUT_MS / 1000 + GRACE_S + 1
            if n == self.count and (len(self.replies) == self.count or now > last_deadline):
                break
            if poller.poll(5):
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    reply = msgpack.unpackb(frames[-1], raw=False)
                    code = reply.get("error", {}).get("code") if reply.get("status") != "ok" else None
                    self.replies[reply.get("id")].append((reply.get("status"), code, time.monotonic()))
        # Late duplicates would arrive after the last answer: listen a little longer.
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            if poller.poll(50):
                frames = sock.recv_multipart()
                reply = msgpack.unpackb(frames[-1], raw=False)
                self.replies[reply.get("id")].append((reply.get("status"), None, time.monotonic()))
        sock.close()

    def summary(self):
        codes = collections.Counter(code or status for answers in self.replies.values()
                                    for status, code, _ in answers)
        return dict(codes)

    def figures(self):
        """The reliability figures docs/RELIABILITY.md records: sent, ok, errors by code, lost
        (never answered), answered twice, and the latency of the ok answers."""
        first = {rid: answers[0] for rid, answers in self.replies.items()}
        ok = sorted(t - self.sent[rid] for rid, (status, _, t) in first.items() if status == "ok")
        errors = collections.Counter(code for status, code, _ in first.values() if status != "ok")
        pct = lambda q: ok[min(len(ok) - 1, int(q * len(ok)))] * 1000 if ok else float("nan")  # noqa: E731
        return (f"sent {len(self.sent)}, ok {len(ok)}, errors {dict(errors) or '{}'}, "
                f"lost {sum(1 for rid in self.sent if rid not in self.replies)}, "
                f"answered twice {sum(1 for a in self.replies.values() if len(a) > 1)}; "
                f"ok latency p50 {pct(0.5):.0f} ms, p99 {pct(0.99):.0f} ms, max {pct(1.0):.0f} ms")


class StatusWatch:
    """Polls `seqpipe status` every 50 ms in a thread: the live replicas each hub sees per stage,
    over time. recovery() turns it into "declared dead after X, back to N replicas after Y"."""

    def __init__(self, run_dir):
        self.run_dir, self.samples, self.stopped = run_dir, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopped.set()
        self.thread.join()

    def _run(self):
        while not self.stopped.is_set():
            out = subprocess.run([SEQPIPE, "status", "--set", f"runtime_dir={self.run_dir}"], capture_output=True,
                                 text=True, timeout=10).stdout
            rows = {line.split()[0]: int(line.split()[1]) for line in out.splitlines()[1:]
                    if len(line.split()) == 5 and line.split()[1].isdigit()}
            self.samples.append((time.monotonic(), rows))
            self.stopped.wait(0.05)

    def recovery(self, stage, since, replicas=2):
        """(seconds from `since` until the hub saw fewer than `replicas`, seconds until it saw
        `replicas` again after that); None where it did not happen while watched."""
        dead = back = None
        for t, rows in self.samples:
            if t < since or stage not in rows:
                continue
            if dead is None and rows[stage] < replicas:
                dead = t - since
            elif dead is not None and rows[stage] >= replicas:
                back = t - since
                break
        return dead, back


def fmt_s(seconds):
    return "not seen" if seconds is None else f"{seconds * 1000:.0f} ms"


class FaultsTest(unittest.TestCase):
    # Heartbeats every 100 ms, a replica dead after 3 missed: the faults are noticed in a test's time.
    LIVENESS = ["liveness.heartbeat_interval_ms=100", "liveness.heartbeat_liveness=3",
                "liveness.reconnect_max_ms=400"]

    @classmethod
    def setUpClass(cls):
        cls.batcher_metrics = free_port()
        cls.pipeline = Pipeline("seqpipe-faults-", [
            "gateway.metrics_port=0", f"batcher.metrics_port={cls.batcher_metrics}",
            "decoder.metrics_port=0", "decoder.num_slots=8", *cls.LIVENESS,
            "batcher.max_queue_delay_us=1000", f"gateway.default_timeout_ms={TIMEOUT_MS}",
            "encoder.credits=1", "batcher.max_queue_size=64", *TWO_OF_EACH], owner=cls)
        cls.run_dir, cls.endpoint = cls.pipeline.run_dir, cls.pipeline.endpoint
        cls.pipeline.wait_until(lambda: cls._ready(), cls.tearDownClass)

    @classmethod
    def _ready(cls):
        load = Load(cls.endpoint, 1, 1)
        load._run()
        return any(status == "ok" for status, _, _ in load.replies.get("r0", []))

    @classmethod
    def tearDownClass(cls):
        cls.pipeline.close()

    def pids(self, stage):
        out = subprocess.run(["pgrep", "-f", f"seqpipe-{stage} .*{self.run_dir}"], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def wait_for_replicas(self, stage, n, within_s=15):
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            out = subprocess.run([SEQPIPE, "status", "--set", f"runtime_dir={self.run_dir}"], capture_output=True,
                                 text=True, timeout=10).stdout
            rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:-1] if line.split()}
            if rows.get(stage, ["0"])[0] == str(n):
                return
            time.sleep(0.2)
        self.fail(f"{stage}: not {n} live replicas within {within_s} s")

    def check_every_request_answered_once(self, load, allowed):
        missing = [rid for rid in load.sent if rid not in load.replies]
        twice = {rid: a for rid, a in load.replies.items() if len(a) > 1}
        late = [rid for rid, answers in load.replies.items()
                if answers[0][2] - load.sent[rid] > TIMEOUT_MS / 1000 + GRACE_S]
        print(f"\n{load.count} requests: {load.summary()}", flush=True)
        self.assertEqual(missing, [], "unanswered requests")
        self.assertEqual(twice, {}, "requests answered twice")
        self.assertEqual(late, [], "answered after deadline + grace")
        codes = {code or status for answers in load.replies.values() for status, code, _ in answers}
        self.assertLessEqual(codes, allowed)

    def test_kill_one_replica_of_each_worker_stage_in_turn(self):
        watch = StatusWatch(self.run_dir).start()
        load = Load(self.endpoint, 400, 80).start()
        time.sleep(0.5)
        killed = {}
        for stage in ("tokenizer", "encoder", "decoder", "postprocessor"):
            victims = self.pids(stage)
            self.assertEqual(len(victims), 2, stage)
            os.kill(victims[0], signal.SIGKILL)
            killed[stage] = time.monotonic()
            time.sleep(0.9)
        load.join()
        self.check_every_request_answered_once(load, {"ok", "unavailable"})
        ok = sum(1 for a in load.replies.values() if a[0][0] == "ok")
        self.assertGreater(ok, load.count * 0.9, "most requests should be served by the surviving replicas")
        for stage in ("tokenizer", "encoder", "decoder", "postprocessor"):  # restarted by seqpipe up, rejoined
            self.wait_for_replicas(stage, 2)
        watch.stop()
        print(f"SIGKILL one replica of each stage, 0.9 s apart, under 80 req/s: {load.figures()}", flush=True)
        for stage, at in killed.items():
            dead, back = watch.recovery(stage, at)
            print(f"  {stage}: declared dead after {fmt_s(dead)}, 2 live replicas again after {fmt_s(back)} "
                  "(restarted by seqpipe up, model loaded, warmed up, announced)", flush=True)

    def test_stopped_decoder_work_is_redispatched_and_it_rejoins_after_sigcont(self):
        self.wait_for_replicas("decoder", 2)
        victim = self.pids("decoder")[0]
        watch = StatusWatch(self.run_dir).start()
        load = Load(self.endpoint, 150, 60).start()
        time.sleep(0.5)
        missed = 'seqpipe_hub_heartbeats_missed_total{stage="batcher"}'
        missed_before = scrape(self.batcher_metrics, missed)
        os.kill(victim, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            time.sleep(1.5)
        finally:
            os.kill(victim, signal.SIGCONT)
            resumed = time.monotonic()
        load.join()
        # Counted at each 100 ms beat while it is silent, until it is declared dead (silent > 300 ms,
        # checked between beats too): at least 2 beats.
        self.assertGreaterEqual(scrape(self.batcher_metrics, missed) - missed_before, 2)
        self.check_every_request_answered_once(load, {"ok", "unavailable"})
        ok = sum(1 for a in load.replies.values() if a[0][0] == "ok")
        self.assertEqual(ok, load.count, "a live decoder was there to take the stopped one's work")
        # Back: it reconnects and announces itself; both decoders then get work again.
        self.wait_for_replicas("decoder", 2)
        watch.stop()
        dead, back = watch.recovery("decoder", stopped)
        print(f"SIGSTOP one decoder for 1.5 s under 60 req/s: {load.figures()}\n"
              f"  decoder: declared dead after {fmt_s(dead)}; after SIGCONT, 2 live replicas again after "
              f"{fmt_s(None if back is None else back - (resumed - stopped))}", flush=True)
        requests = 'seqpipe_stage_requests_total{stage="decoder"}'
        before = self.pipeline.samples("decoder", 2, requests)
        burst = Load(self.endpoint, 120, 400, max_new_tokens=16).start()
        burst.join()
        self.check_every_request_answered_once(burst, {"ok"})
        after = self.pipeline.samples("decoder", 2, requests)
        self.assertTrue(all(a > b for a, b in zip(after, before)), f"decoder requests {before} -> {after}")


def rss_kb(run_dir):
    """VmRSS of every seqpipe process serving this run dir, by pid."""
    out = subprocess.run(["pgrep", "-f", f"seqpipe-.*{run_dir}"], capture_output=True, text=True).stdout.split()
    rss = {}
    for pid in out:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss[int(pid)] = int(line.split()[1])
        except FileNotFoundError:
            pass
    return rss


class OverloadTest(FaultsTest):
    # Its own pipeline (setUpClass runs again for this class): the fault tests leave none behind.
    # Shedding, not fault detection: the default heartbeats. With the 300 ms above, a replica
    # busy at twice its capacity beside another test on 2 cores was once taken for dead, and
    # 10 requests were answered "unavailable".
    LIVENESS = []
    test_kill_one_replica_of_each_worker_stage_in_turn = None
    test_stopped_decoder_work_is_redispatched_and_it_rejoins_after_sigcont = None

    def test_open_loop_at_twice_capacity_sheds_and_memory_stays_bounded(self):
        for stage in ("tokenizer", "encoder", "decoder", "postprocessor"):
            self.wait_for_replicas(stage, 2)
        # Capacity: a burst far above it, ok answers per second.
        burst = Load(self.endpoint, 1500, 3000).start()
        burst.join()
        ok_times = sorted(a[0][2] for a in burst.replies.values() if a[0][0] == "ok")
        capacity = len(ok_times) / max(1e-3, ok_times[-1] - min(burst.sent.values()))
        rate = 2 * capacity
        before = rss_kb(self.run_dir)
        load = Load(self.endpoint, int(rate * 20), rate).start()
        load.join()
        after = rss_kb(self.run_dir)
        # deadline_exceeded: the batcher drops at once what could no longer finish in time
        self.check_every_request_answered_once(load, {"ok", "overloaded", "deadline_exceeded"})
        latencies = sorted(a[0][2] - load.sent[rid] for rid, a in load.replies.items() if a[0][0] == "ok")
        p99 = latencies[int(0.99 * (len(latencies) - 1))]
        shed = sum(1 for a in load.replies.values() if a[0][1] == "overloaded")
        print(f"capacity {capacity:.0f}/s, offered {rate:.0f}/s for 20 s: {len(latencies)} ok, {shed} overloaded, "
              f"ok p50 {latencies[len(latencies) // 2] * 1000:.1f} ms p99 {p99 * 1000:.1f} ms", flush=True)
        print(f"open loop at twice capacity: {load.figures()}", flush=True)
        print("RSS kB before -> after: " + ", ".join(f"{pid}: {before[pid]} -> {after.get(pid)}" for pid in before),
              flush=True)
        self.assertGreater(shed, 0, "twice the capacity must be shed in part")
        self.assertGreater(len(latencies), 0)
        self.assertLess(p99, TIMEOUT_MS / 1000)
        for pid, kb in before.items():  # bounded: queues are capped, nothing grows with the load
            self.assertLess(after.get(pid, 0), kb * 2 + 64 * 1024, f"pid {pid} RSS {kb} -> {after.get(pid)} kB")


if __name__ == "__main__":
    unittest.main(verbosity=2)
