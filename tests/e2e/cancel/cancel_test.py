"""Cancellation end to end: clients cancel requests (protocol op "cancel") while the pipeline
works on them.

`seqpipe up` starts 2 replicas of every worker stage; each decoder has 8 KV-cache slots. Long
requests (max_new_tokens = min_new_tokens = 3000: no early eos) fill the decoders' slots; some
are cancelled while they decode. Checks: each request gets exactly one reply (`cancelled` for
those cancelled in time, `ok` for the others), the cancelled sequences stop on the decoders
(their slots come back in `seqpipe status` while the others still run; the decoders count them
in seqpipe_stage_cancelled_items_total), a cancel of a request already answered gets no reply,
cancels racing every stage (sent right after their request) are each answered once, the CLI's
`seqpipe send --cancel-after-ms` and the Python client cancel, and the pipeline still serves.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL (tests/e2e/harness.py); PYTHONPATH has
clients/python.
"""
import collections
import os
import subprocess
import sys
import time
import unittest

import msgpack
import zmq
from seqpipe_client import Client

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import SEQPIPE, TWO_OF_EACH, Pipeline, answers  # noqa: E402

LONG = 3000        # tokens: a sequence runs for seconds on the tiny model
SLOTS = 8          # per decoder
TIMEOUT_MS = 60000


class Dealer:
    """One DEALER; replies collected by id (every reply kept, to count duplicates)."""

    def __init__(self, endpoint):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.replies = collections.defaultdict(list)  # id -> [(status, code, time)]

    def send(self, rid, text, max_new_tokens, min_new_tokens=0):
        self.sock.send_multipart([b"", msgpack.packb({
            "v": 1, "id": rid, "text": text, "timeout_ms": TIMEOUT_MS,
            "params": {"max_new_tokens": max_new_tokens, "min_new_tokens": min_new_tokens}})])

    def cancel(self, rid):
        self.sock.send_multipart([b"", msgpack.packb({"v": 1, "op": "cancel", "id": rid})])

    def collect(self, until, stop_when=None):
        """Receives until `until` (monotonic) or until stop_when() is true."""
        while time.monotonic() < until and not (stop_when and stop_when()):
            if self.sock.poll(20):
                while True:
                    try:
                        frames = self.sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    reply = msgpack.unpackb(frames[-1], raw=False)
                    code = reply["error"]["code"] if reply["status"] != "ok" else "ok"
                    self.replies[reply["id"]].append((reply["status"], code, time.monotonic()))

    def close(self):
        self.sock.close()


class CancelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pipeline = Pipeline("seqpipe-cancel-", [
            "gateway.metrics_port=0", "batcher.metrics_port=0", "decoder.metrics_port=0",
            f"decoder.num_slots={SLOTS}", f"decoder.max_new_tokens={LONG}", "decoder.warmup_batch_size=0",
            "batcher.max_queue_delay_us=1000", f"gateway.default_timeout_ms={TIMEOUT_MS}", *TWO_OF_EACH], owner=cls)
        cls.run_dir, cls.endpoint = cls.pipeline.run_dir, cls.pipeline.endpoint
        cls.client = Client(cls.endpoint, timeout_ms=5000)
        cls.pipeline.wait_until(lambda: answers(cls.client), cls.tearDownClass)
        # Both decoders joined (a request may go through with one).
        cls.wait_for(lambda: cls.status()["decoder"][0] == 2, 20, "two decoders")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.pipeline.close()

    @classmethod
    def status(cls):
        """seqpipe status as {stage: [replicas, in_flight, queued, free_credits]} (a hub's free
        credits, "-", as -1)."""
        out = subprocess.run([SEQPIPE, "status", "--set", f"runtime_dir={cls.run_dir}"], capture_output=True,
                             text=True, timeout=10).stdout
        rows = {}
        for line in out.splitlines()[1:]:
            parts = line.split()
            if len(parts) == 5 and parts[1].isdigit():
                rows[parts[0]] = [-1 if p == "-" else int(p) for p in parts[1:]]
        return rows

    @classmethod
    def wait_for(cls, condition, within_s, what):
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.05)
        raise AssertionError(f"not within {within_s} s: {what} (status {cls.status()})")

    def decoder_cancelled(self):
        return sum(self.pipeline.samples("decoder", 2, 'seqpipe_stage_cancelled_items_total{stage="decoder"}'))

    def test_cancelled_sequences_stop_on_the_decoders_and_free_their_slots(self):
        dealer = Dealer(self.endpoint)
        try:
            cancelled_before = self.decoder_cancelled()
            ids = [f"long{i}" for i in range(12)]
            for i, rid in enumerate(ids):
                dealer.send(rid, f"teh speling {i}", LONG, LONG)
            # All 12 decoding: 12 of the 16 slots in use.
            self.wait_for(lambda: self.status()["decoder"][1] == 12, 20, "12 sequences decoding")
            doomed, kept = ids[:8], ids[8:]
            sent_at = time.monotonic()
            for rid in doomed:
                dealer.cancel(rid)
            dealer.collect(sent_at + 5, lambda: all(rid in dealer.replies for rid in doomed))
            answered_in = max(dealer.replies[rid][0][2] for rid in doomed) - sent_at
            # Their slots come back (at most the other four still decode).
            self.wait_for(lambda: self.status()["decoder"][1] <= 4, 5, "cancelled slots back")
            freed_in = time.monotonic() - sent_at
            self.assertEqual(self.decoder_cancelled() - cancelled_before, 8)
            self.assertEqual({rid: [a[1] for a in dealer.replies[rid]] for rid in doomed},
                             {rid: ["cancelled"] for rid in doomed})
            dealer.collect(time.monotonic() + TIMEOUT_MS / 1000, lambda: all(rid in dealer.replies for rid in kept))
            dealer.collect(time.monotonic() + 0.5)  # duplicates would come now
            self.assertEqual({rid: [a[1] for a in dealer.replies[rid]] for rid in ids},
                             {rid: ["cancelled"] if rid in doomed else ["ok"] for rid in ids})
            self.wait_for(lambda: self.status()["decoder"][1:] == [0, 0, 2 * SLOTS], 5, "every slot free")
            print(f"\n8 of 12 long requests cancelled: all answered `cancelled` within {answered_in * 1000:.0f} ms, "
                  f"decoder slots back within {freed_in * 1000:.0f} ms (status polls); 4 finished ok", flush=True)
        finally:
            dealer.close()

    def test_cancels_racing_every_stage_get_one_reply_each_and_late_cancels_none(self):
        dealer = Dealer(self.endpoint)
        try:
            ids = [f"race{i}" for i in range(60)]
            for i, rid in enumerate(ids):
                dealer.send(rid, f"hello world {i}", 400, 400)
                if i % 2 == 0:
                    dealer.cancel(rid)  # right behind it: caught at the gateway, tokenizer, batcher or decoder
            dealer.collect(time.monotonic() + 30, lambda: all(rid in dealer.replies for rid in ids))
            dealer.collect(time.monotonic() + 0.5)
            codes = {rid: [a[1] for a in dealer.replies[rid]] for rid in ids}
            self.assertEqual([rid for rid in ids if len(codes[rid]) != 1], [], f"not exactly one reply: {codes}")
            for i, rid in enumerate(ids):
                self.assertIn(codes[rid][0], ("cancelled", "ok") if i % 2 == 0 else ("ok",), rid)
            self.assertGreater(sum(1 for rid in ids if codes[rid] == ["cancelled"]), 0)
            # A cancel of an answered request: no reply at all.
            dealer.cancel("race1")
            dealer.collect(time.monotonic() + 0.5)
            self.assertEqual(len(dealer.replies["race1"]), 1)
            self.wait_for(lambda: self.status()["decoder"][1:] == [0, 0, 2 * SLOTS], 5, "every slot free")
            summary = collections.Counter(c[0] for c in codes.values())
            print(f"\n60 requests, 30 cancelled right after sending: {dict(summary)}", flush=True)
        finally:
            dealer.close()

    def test_cli_and_python_client_cancel_and_the_pipeline_still_serves(self):
        out = subprocess.run([SEQPIPE, "send", "--set", f"runtime_dir={self.run_dir}", "--endpoint", self.endpoint,
                              "--max-new-tokens", str(LONG), "--min-new-tokens", str(LONG), "--timeout-ms", "30000",
                              "--cancel-after-ms", "300", "teh speling"], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 1, out.stdout + out.stderr)
        self.assertIn("error cancelled", out.stderr)
        rid = self.client.submit("hello world", max_new_tokens=LONG, min_new_tokens=LONG, timeout_ms=30000)
        time.sleep(0.3)
        self.client.cancel(rid)
        reply = self.client.result(rid, 5000)
        self.assertEqual(reply["status"], "error")
        self.assertEqual(reply["error"]["code"], "cancelled")
        self.wait_for(lambda: self.status()["decoder"][1:] == [0, 0, 2 * SLOTS], 5, "every slot free")
        self.assertEqual(self.client.generate("teh speling", max_new_tokens=8)["status"], "ok")


if __name__ == "__main__":
    unittest.main(verbosity=2)
