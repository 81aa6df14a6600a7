"""End to end: `seqpipe up` starts the real processes (2 replicas of every worker stage) on ipc://
endpoints in a temp dir; requests go through the gateway socket as a client sends them.

Checks: replies equal seqpipe-generate's output for the same inputs (greedy and beam); a burst of
concurrent requests is answered completely; malformed requests get their error replies while the
pipeline keeps serving; with one encoder replica stopped (SIGSTOP) the other takes the new work.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_GENERATE, SEQPIPE_MKMODEL; PYTHONPATH has clients/python.
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import unittest

import msgpack
import random
import zmq
from seqpipe_client import Client, SeqpipeError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import SEQPIPE, Pipeline, answers, free_port, scrape  # noqa: E402

GENERATE = os.environ["SEQPIPE_GENERATE"]
TEXTS = ["teh speling is bad", "hello world", "i cant beleive teh wether", "a"]


def generate_text(model, text, beams):
    out = subprocess.run([GENERATE, "--model", model, "--text", text, "--max-new-tokens", "12",
                          "--num-beams", str(beams), "--threads", "1", "--json"],
                         check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)["text"]


class PipelineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gateway_metrics, cls.batcher_metrics = free_port(), free_port()
        cls.pipeline = Pipeline("seqpipe-e2e-", [
            f"gateway.metrics_port={cls.gateway_metrics}", f"batcher.metrics_port={cls.batcher_metrics}",
            "tokenizer.replicas=2", "encoder.replicas=2", "decoder.replicas=2", "postprocessor.replicas=2",
            "batcher.max_queue_delay_us=1000", "gateway.default_timeout_ms=20000",
            "encoder.credits=1", "gateway.cache_bytes=1048576"], owner=cls)
        cls.model, cls.run_dir, cls.endpoint = cls.pipeline.model, cls.pipeline.run_dir, cls.pipeline.endpoint
        cls.client = Client(cls.endpoint, timeout_ms=20000)
        cls.pipeline.wait_until(lambda: answers(cls.client), cls.tearDownClass)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.pipeline.close()

    def test_replies_equal_seqpipe_generate(self):
        for beams in (1, 4):
            for text in TEXTS:
                reply = self.client.generate(text, max_new_tokens=12, num_beams=beams)
                self.assertEqual(reply["text"], generate_text(self.model, text, beams), f"{text!r} beams {beams}")
                t = reply["timings_us"]
                self.assertGreaterEqual(t["total"], t["encode"] + t["decode"])  # 0 for a cache hit

    def test_batch_request_keeps_order(self):
        reply = self.client.generate(TEXTS, max_new_tokens=12, return_scores=True)
        self.assertEqual(reply["texts"], [generate_text(self.model, t, 1) for t in TEXTS])
        self.assertEqual(len(reply["scores"]), len(TEXTS))

    def test_concurrent_requests_are_all_answered(self):
        answers, errors = [], []

        def worker(n):
            with Client(self.endpoint, timeout_ms=20000) as c:
                for i in range(10):
                    try:
                        answers.append(c.generate(f"{TEXTS[i % len(TEXTS)]} {n}", max_new_tokens=8)["text"])
                    except SeqpipeError as e:
                        errors.append(e)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(errors, [])
        self.assertEqual(len(answers), 80)

    def test_malformed_requests_get_error_replies_and_the_pipeline_keeps_serving(self):
        cases = [
            (b"\xc1", "invalid_argument"),
            (msgpack.packb({"v": 1}), "invalid_argument"),
            (msgpack.packb({"v": 1, "text": ""}), "invalid_argument"),
            # raw bytes packed as a msgpack str: not valid UTF-8
            (msgpack.packb({"v": 1, "text": b"ab\xff\xfe"}, use_bin_type=False), "invalid_argument"),
            (msgpack.packb({"v": 1, "text": "x", "bogus": 1}), "invalid_argument"),
            (msgpack.packb({"v": 1, "text": "x", "params": {"num_beams": 0}}), "invalid_argument"),
            (msgpack.packb({"v": 1, "text": "x", "params": {"priority": 2}}), "invalid_argument"),  # 1 level
            (msgpack.packb({"v": 1, "op": "cancel"}), "invalid_argument"),  # no id
            (msgpack.packb({"v": 1, "op": "health", "id": "h"}), "invalid_argument"),
            (msgpack.packb({"v": 1, "text": "hello " * 2000}), "too_long"),
        ]
        for payload, code in cases:
            reply = self.client.call_raw(payload, 5000)
            self.assertEqual(reply["status"], "error", payload[:40])
            if code:
                self.assertEqual(reply["error"]["code"], code, reply["error"]["message"])
        self.assertEqual(self.client.generate("hello world", max_new_tokens=12)["text"],
                         generate_text(self.model, "hello world", 1))
        # The one level there is may be named; it changes nothing in the output.
        self.assertEqual(self.client.generate("hello world", max_new_tokens=12, priority=1)["text"],
                         generate_text(self.model, "hello world", 1))

    def test_repeated_text_is_answered_from_the_cache(self):
        hits = 'seqpipe_gateway_cache_lookups_total{result="hit"}'
        first = self.client.generate("a text seen twice", max_new_tokens=10)
        before = scrape(self.gateway_metrics, hits)
        second = self.client.generate("a text seen twice", max_new_tokens=10)
        self.assertEqual(second["text"], first["text"])
        self.assertEqual(scrape(self.gateway_metrics, hits) - before, 1)
        self.assertEqual(second["timings_us"]["encode"], 0)  # no stage saw it
        spaced = self.client.generate("a text  seen twice", max_new_tokens=10)  # other whitespace: a miss
        self.assertGreater(spaced["timings_us"]["encode"], 0)
        other = self.client.generate("a text seen twice", max_new_tokens=11)  # other params: a miss
        self.assertGreater(other["timings_us"]["encode"], 0)

    def status(self):
        return subprocess.run([SEQPIPE, "status", "--set", f"runtime_dir={self.run_dir}"], capture_output=True,
                              text=True, timeout=30)

    def test_status_says_what_the_running_pipeline_serves(self):
        # Asked with only the runtime dir: the hubs, not the local config, say which model, which
        # compute type and which bound ports.
        out = self.status().stdout
        self.assertRegex(out, r"(?m)^gateway serves: models \S+ \(" + re.escape(self.model) + r"\); "
                              r"clients ipc://\S+; HTTP (off|:\d+); gRPC (off|:\d+); "
                              rf"/metrics :{self.gateway_metrics}$")
        self.assertRegex(out, rf"(?m)^batcher runs: encoder float32 on cpu; decoder float32 on cpu; "
                              rf"/metrics :{self.batcher_metrics}$")
        self.assertNotIn("local config", out)

    def test_status_counts_client_errors_apart_from_server_errors(self):
        def counts():
            out = self.status().stdout
            m = re.search(r"(?m)^gateway: up \S+; \d+ requests, (\d+) server errors \(\d+\.\d\d%\), "
                          r"(\d+) client errors;", out)
            self.assertIsNotNone(m, out)
            return int(m.group(1)), int(m.group(2))
        server, client = counts()
        with self.assertRaises(SeqpipeError):
            self.client.generate("x", num_beams=0)  # invalid_argument: the client's error
        self.assertEqual(counts(), (server, client + 1))

    def test_status_shows_every_stage(self):
        out = self.status()
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("ready: yes", out.stdout)
        rows = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()
                if len(line.split()) == 5 and line.split()[1].isdigit()}
        self.assertEqual(sorted(rows), ["batcher", "decoder", "encoder", "gateway", "postprocessor", "tokenizer"])
        for stage in ("tokenizer", "encoder", "decoder", "postprocessor"):
            self.assertEqual(rows[stage][0], "2", f"{stage}: {out.stdout}")
            self.assertTrue(rows[stage][3].isdigit(), f"{stage}: {out.stdout}")
        # The hubs grant credits and hold none; the summary says what runs and how it is doing.
        self.assertEqual(rows["gateway"][3], "-", out.stdout)
        self.assertEqual(rows["batcher"][3], "-", out.stdout)
        self.assertRegex(out.stdout, r"(?m)^gateway: up \d+m\d\ds; \d+ requests, \d+ server errors "
                                     r"\(\d+\.\d\d%\), \d+ client errors; replicas lost: tokenizer 0$")
        self.assertRegex(out.stdout, r"(?m)^batcher: up \d+m\d\ds; replicas lost: encoder 0, decoder 0, "
                                     r"postprocessor 0$")

    def test_metrics_count_requests(self):
        ok = 'seqpipe_gateway_request_seconds_count{status="ok"}'
        before = scrape(self.gateway_metrics, ok)
        for text in TEXTS:
            self.client.generate(text, max_new_tokens=4)
        self.assertEqual(scrape(self.gateway_metrics, ok) - before, len(TEXTS))
        batches = scrape(self.batcher_metrics, 'seqpipe_stage_batch_size_count{stage="batcher"}')
        self.assertGreater(batches, 0)

    def test_thousands_of_random_and_mutated_frames_leave_the_gateway_serving(self):
        rng = random.Random(7)
        good = msgpack.packb({"v": 1, "id": "g", "text": "hello world", "params": {"max_new_tokens": 4}})
        context = zmq.Context.instance()
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        for i in range(3000):
            if i % 3 == 0:
                frame = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
            else:
                frame = bytearray(good)
                for _ in range(rng.randint(1, 4)):
                    frame[rng.randrange(len(frame))] = rng.getrandbits(8)
                frame = bytes(frame)
            parts = [b"", frame] if i % 7 else [frame]  # some without the empty delimiter
            sock.send_multipart(parts)
        answered = 0
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        while poller.poll(2000):
            sock.recv_multipart()
            answered += 1
        sock.close()
        self.assertGreater(answered, 2000)  # garbage gets error replies, not silence
        self.assertEqual(self.client.generate("hello world", max_new_tokens=12)["text"],
                         generate_text(self.model, "hello world", 1))

    def test_stopped_encoder_replica_does_not_stall_new_work(self):
        pids = subprocess.run(["pgrep", "-f", f"seqpipe-encoder.*{self.run_dir}"], capture_output=True,
                              text=True).stdout.split()
        self.assertEqual(len(pids), 2, "two encoder replicas")
        victim = int(pids[0])
        os.kill(victim, signal.SIGSTOP)
        try:
            failed, answered = 0, 0
            for text in TEXTS * 3:
                try:
                    self.client.generate(text, max_new_tokens=6, timeout_ms=3000)
                    answered += 1
                except SeqpipeError as e:
                    self.assertEqual(e.code, "deadline_exceeded")
                    failed += 1
            # The stopped replica holds at most its credit (encoder.credits=1): one batch may time
            # out there; every other request is served by the live replica.
            self.assertLessEqual(failed, 1)
            self.assertGreaterEqual(answered, len(TEXTS) * 3 - 1)
        finally:
            os.kill(victim, signal.SIGCONT)


if __name__ == "__main__":
    unittest.main(verbosity=2)
