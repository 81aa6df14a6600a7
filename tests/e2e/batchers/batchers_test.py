"""Two batchers behind one gateway: the gateway submits to both (gateway.batcher_endpoints), the
encoders, decoders and postprocessors serve both (their hub_endpoints), and when one batcher is
SIGKILLed under load the gateway submits the requests it held to the other.

`seqpipe up` runs the gateway, batcher 1 and 2 replicas of every worker stage; the test starts
batcher 2 itself (its own four endpoints). Checks: both batchers get work; under a steady load
with batcher 2 killed, every request is answered exactly once, with ok or `unavailable`, and at
least 95% ok (its work re-submitted to batcher 1); a restarted batcher 2 gets work again.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL (tests/e2e/harness.py).
"""
import collections
import os
import signal
import subprocess
import sys
import time
import unittest

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import SEQPIPE, TWO_OF_EACH, Pipeline, free_port, scrape, start, stop  # noqa: E402

BATCHER = os.path.join(os.path.dirname(os.path.realpath(SEQPIPE)), "..", "services", "batcher", "seqpipe-batcher")
TIMEOUT_MS = 6000
B2 = {"ingress": "b2-in", "encoder": "b2-enc", "decoder": "b2-dec", "postprocessor": "b2-post"}


def load(endpoint, count, rate, during=None):
    """Sends `count` requests at `rate`/s from one DEALER, calls during() once after a third of
    them, and returns {id: [(status, code)]} with every reply received (listening 0.5 s more)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    replies = collections.defaultdict(list)
    start, sent = time.monotonic(), 0
    end = None
    while end is None or time.monotonic() < end:
        now = time.monotonic()
        while sent < count and now >= start + sent / rate:
            sock.send_multipart([b"", msgpack.packb({"v": 1, "id": f"r{sent}", "text": f"teh speling {sent}",
                                                     "timeout_ms": TIMEOUT_MS, "params": {"max_new_tokens": 8}})])
            sent += 1
            if sent == count // 3 and during:
                during()
        if sent == count and end is None and (len(replies) == count or now > start + count / rate + TIMEOUT_MS / 1000 + 2):
            end = time.monotonic() + 0.5
        if sock.poll(5):
            reply = msgpack.unpackb(sock.recv_multipart()[-1], raw=False)
            replies[reply["id"]].append((reply["status"], reply.get("error", {}).get("code", "ok")))
    sock.close()
    return {f"r{i}": replies.get(f"r{i}", []) for i in range(count)}


class TwoBatchersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.batcher2 = None
        cls.b1_metrics, cls.b2_metrics = free_port(), free_port()
        hubs = lambda stage: (f'{stage}.hub_endpoints=["ipc://{{runtime_dir}}/{stage}.sock", '  # noqa: E731
                              f'"ipc://{{runtime_dir}}/{B2[stage]}.sock"]')
        cls.settings = ["liveness.heartbeat_interval_ms=100", "liveness.heartbeat_liveness=3",
                        "liveness.reconnect_max_ms=400", "batcher.max_queue_delay_us=1000",
                        f"gateway.default_timeout_ms={TIMEOUT_MS}", "decoder.num_slots=16", *TWO_OF_EACH]
        cls.pipeline = Pipeline("seqpipe-batchers-", cls.settings + [
            "gateway.metrics_port=0", f"batcher.metrics_port={cls.b1_metrics}",
            'gateway.batcher_endpoints=["ipc://{runtime_dir}/batcher-in.sock", "ipc://{runtime_dir}/b2-in.sock"]',
            hubs("encoder"), hubs("decoder"), hubs("postprocessor")], owner=cls)
        cls.run_dir, cls.endpoint = cls.pipeline.run_dir, cls.pipeline.endpoint
        cls.start_batcher2()
        cls.pipeline.wait_until(lambda: all(a and a[0][0] == "ok" for a in load(cls.endpoint, 4, 50).values()), cls.tearDownClass)

    @classmethod
    def start_batcher2(cls):
        args = [BATCHER]
        for s in cls.settings + [f"runtime_dir={cls.run_dir}", f"batcher.metrics_port={cls.b2_metrics}"] + [
                f"batcher.{key}_endpoint=ipc://{{runtime_dir}}/{name}.sock" for key, name in B2.items()]:
            args += ["--set", s]
        if cls.batcher2 is not None:
            cls.batcher2_log.close()
        cls.batcher2_log = open(os.path.join(cls.pipeline.tmp, "batcher2.log"), "a")
        cls.batcher2 = start(args, owner=cls, stdout=cls.batcher2_log, stderr=subprocess.STDOUT)

    @classmethod
    def tearDownClass(cls):
        if cls.batcher2 is not None:
            stop(cls.batcher2)
            cls.batcher2_log.close()
        cls.pipeline.close()

    def sequences(self, port):
        return scrape(port, 'seqpipe_stage_requests_total{stage="batcher"}')

    def test_1_both_batchers_get_work(self):
        before = self.sequences(self.b1_metrics), self.sequences(self.b2_metrics)
        replies = load(self.endpoint, 40, 200)
        self.assertEqual({rid: a for rid, a in replies.items() if a != [("ok", "ok")]}, {})
        after = self.sequences(self.b1_metrics), self.sequences(self.b2_metrics)
        self.assertGreaterEqual(after[0] - before[0], 10, "batcher 1 got its share")
        self.assertGreaterEqual(after[1] - before[1], 10, "batcher 2 got its share")

    def test_2_a_killed_batchers_requests_go_to_the_other(self):
        killed = {}

        def kill():
            os.killpg(self.batcher2.pid, signal.SIGKILL)
            killed["at"] = time.monotonic()

        replies = load(self.endpoint, 300, 60, during=kill)
        self.batcher2.wait()
        missing = [rid for rid, a in replies.items() if not a]
        twice = {rid: a for rid, a in replies.items() if len(a) > 1}
        codes = collections.Counter(a[0][1] for a in replies.values() if a)
        print(f"\n300 requests at 60/s, batcher 2 SIGKILLed after 100: {dict(codes)}, lost {len(missing)}, "
              f"answered twice {len(twice)}", flush=True)
        self.assertEqual(missing, [])
        self.assertEqual(twice, {})
        self.assertLessEqual(set(codes), {"ok", "unavailable"})
        self.assertGreaterEqual(codes["ok"], 285, "the killed batcher's requests were re-submitted")
        # Restarted, it is heard from again and gets new work.
        self.start_batcher2()
        deadline = time.monotonic() + 20
        while True:
            replies = load(self.endpoint, 10, 100)
            self.assertEqual({rid: a for rid, a in replies.items() if a != [("ok", "ok")]}, {})
            if self.sequences_or_zero(self.b2_metrics) > 0:
                break
            self.assertLess(time.monotonic(), deadline, "a restarted batcher 2 gets no work")
        print(f"restarted batcher 2 gets work {time.monotonic() - killed['at']:.1f} s after the kill", flush=True)

    def sequences_or_zero(self, port):
        try:
            return self.sequences(port)
        except Exception:
            return 0


if __name__ == "__main__":
    unittest.main(verbosity=2)
