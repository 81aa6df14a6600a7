"""Two gateways sharing one pipeline: the tokenizers serve both (tokenizer.hub_endpoints lists both
gateways' tokenizer endpoints), and every result goes back to the gateway that owns the request.

`seqpipe up` runs gateway 1, the batcher and 2 replicas of every worker stage; the test starts
gateway 2 itself (its own client, tokenizer and results endpoints). Checks: both gateways answer
requests sent to them, ok, each exactly once, with the text seqpipe-generate gives; each
tokenizer announced a share of its credits to each gateway (`seqpipe status` per gateway); when
gateway 2 is killed, gateway 1 goes on serving (the tokenizers' connection to the dead one only
reconnects in the background), and a restarted gateway 2 is served again.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_GENERATE, SEQPIPE_MKMODEL (tests/e2e/harness.py).
"""
import json
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
from harness import SEQPIPE, TWO_OF_EACH, Pipeline, start, stop  # noqa: E402
from seqpipe_client import Client, SeqpipeError  # noqa: E402

GENERATE = os.environ["SEQPIPE_GENERATE"]
GATEWAY = os.path.join(os.path.dirname(os.path.realpath(SEQPIPE)), "..", "services", "gateway", "seqpipe-gateway")
TEXTS = ["teh speling is bad", "hello world", "i cant beleive teh wether"]


def ask(endpoint, texts, timeout_s=20):
    """Sends one request per text on a DEALER; returns {id: [replies]} after all arrived (or the timeout)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    for i, text in enumerate(texts):
        sock.send_multipart([b"", msgpack.packb({"v": 1, "id": f"r{i}", "text": text, "timeout_ms": 10000,
                                                 "params": {"max_new_tokens": 12}})])
    replies = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(replies) < len(texts):
        if sock.poll(100):
            reply = msgpack.unpackb(sock.recv_multipart()[-1], raw=False)
            replies.setdefault(reply["id"], []).append(reply)
    if sock.poll(300):  # a duplicate would be here by now
        reply = msgpack.unpackb(sock.recv_multipart()[-1], raw=False)
        replies.setdefault(reply["id"], []).append(reply)
    sock.close()
    return replies


class TwoGatewaysTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pipeline = None
        cls.gateway2 = None
        # Gateway 2's tokenizer endpoint is known before it starts: the tokenizers connect to it.
        cls.pipeline = Pipeline("seqpipe-gateways-", [
            "gateway.metrics_port=0", "batcher.metrics_port=0", "batcher.max_queue_delay_us=1000",
            'tokenizer.hub_endpoints=["ipc://{runtime_dir}/tokenizer.sock", "ipc://{runtime_dir}/tokenizer-2.sock"]',
            "liveness.heartbeat_interval_ms=100", "liveness.reconnect_max_ms=400", *TWO_OF_EACH], owner=cls)
        cls.run_dir, cls.tmp = cls.pipeline.run_dir, cls.pipeline.tmp
        cls.endpoint1 = cls.pipeline.endpoint
        cls.endpoint2 = f"ipc://{cls.run_dir}/gateway-2.sock"
        cls.start_gateway2()
        cls.expected = {}
        for text in TEXTS:
            out = subprocess.run([GENERATE, "--model", cls.pipeline.model, "--text", text, "--max-new-tokens", "12",
                                  "--threads", "1", "--json"], check=True, capture_output=True, text=True, timeout=60)
            cls.expected[text] = json.loads(out.stdout)["text"]
        cls.pipeline.wait_until(lambda: all(cls.serves(e) for e in (cls.endpoint1, cls.endpoint2)), cls.tearDownClass)

    @classmethod
    def start_gateway2(cls):
        args = [GATEWAY]
        for s in [f"model.dir={cls.pipeline.model}", f"runtime_dir={cls.run_dir}",
                  "gateway.client_endpoint=ipc://{runtime_dir}/gateway-2.sock",
                  "gateway.tokenizer_endpoint=ipc://{runtime_dir}/tokenizer-2.sock",
                  "gateway.results_endpoint=ipc://{runtime_dir}/results-2.sock",
                  "gateway.metrics_port=0", "gateway.http_endpoint=", "liveness.heartbeat_interval_ms=100"]:
            args += ["--set", s]
        if cls.gateway2 is not None:
            cls.gateway2_log.close()
        cls.gateway2_log = open(os.path.join(cls.tmp, "gateway2.log"), "a")
        cls.gateway2 = start(args, owner=cls, stdout=cls.gateway2_log, stderr=subprocess.STDOUT)

    @classmethod
    def serves(cls, endpoint):
        replies = ask(endpoint, ["warm up"], timeout_s=2)
        return replies.get("r0", [{}])[0].get("status") == "ok"

    @classmethod
    def tearDownClass(cls):
        if cls.gateway2 is not None:
            stop(cls.gateway2)
            cls.gateway2_log.close()
        if cls.pipeline is not None:
            cls.pipeline.close()

    def status(self, tokenizer_endpoint):
        """The gateway's and its tokenizers' rows of `seqpipe status`, asked of one gateway."""
        out = subprocess.run([SEQPIPE, "status", "--set", f"runtime_dir={self.run_dir}",
                              "--set", f"gateway.tokenizer_endpoint={tokenizer_endpoint}"],
                             capture_output=True, text=True, timeout=10).stdout
        return {line.split()[0]: [-1 if p == "-" else int(p) for p in line.split()[1:]]
                for line in out.splitlines() if len(line.split()) == 5 and line.split()[1].isdigit()}

    def check_served(self, endpoint):
        replies = ask(endpoint, TEXTS)
        self.assertEqual(sorted(replies), [f"r{i}" for i in range(len(TEXTS))])
        for i, text in enumerate(TEXTS):
            self.assertEqual(len(replies[f"r{i}"]), 1, replies[f"r{i}"])
            reply = replies[f"r{i}"][0]
            self.assertEqual(reply["status"], "ok", reply)
            self.assertEqual(reply["text"], self.expected[text])

    def test_1_both_gateways_are_served_by_the_same_tokenizers(self):
        self.check_served(self.endpoint1)
        self.check_served(self.endpoint2)
        # Each tokenizer splits its 4 credits: 2 to each gateway (2 tokenizers: 4 free each side).
        for tokenizer_endpoint in (f"ipc://{self.run_dir}/tokenizer.sock", f"ipc://{self.run_dir}/tokenizer-2.sock"):
            rows = self.status(tokenizer_endpoint)
            self.assertEqual(rows["tokenizer"][0], 2, rows)  # replicas
            self.assertEqual(rows["tokenizer"][1] + rows["tokenizer"][3], 4, rows)  # in flight + free

    def test_2_a_dead_gateway_does_not_stop_the_other_and_a_new_one_is_served(self):
        os.killpg(self.gateway2.pid, signal.SIGKILL)
        self.gateway2.wait()
        started = time.monotonic()
        self.check_served(self.endpoint1)
        time.sleep(1.0)  # the tokenizers notice gateway 2 is gone and reconnect in the background
        self.check_served(self.endpoint1)
        self.start_gateway2()
        deadline = time.monotonic() + 20
        while not self.serves(self.endpoint2):
            self.assertLess(time.monotonic(), deadline, "a restarted gateway 2 is not served")
        print(f"\ngateway 2 killed and restarted: gateway 1 served throughout; gateway 2 served again "
              f"{time.monotonic() - started:.1f} s after the kill (1 s of it waited on purpose)", flush=True)
        self.check_served(self.endpoint2)

    def test_3_clients_listing_both_gateways_lose_nothing_when_one_is_killed_under_load(self):
        """4 clients, each with both endpoints (gateway 2 first), send requests back to back for 3 s;
        gateway 2 is SIGKILLed 1 s in. Every request must be answered ok, with the right text."""
        results, stop_at = [], time.monotonic() + 3.0

        def user(index):
            texts = TEXTS[index % len(TEXTS):] + TEXTS[:index % len(TEXTS)]
            with Client([self.endpoint2, self.endpoint1], timeout_ms=8000) as client:
                i = 0
                while time.monotonic() < stop_at:
                    text = texts[i % len(texts)]
                    started = time.monotonic()
                    try:
                        reply = client.generate(text, max_new_tokens=12, timeout_ms=8000)
                        results.append((text, reply["text"], time.monotonic() - started))
                    except SeqpipeError as e:
                        results.append((text, f"error {e.code}", time.monotonic() - started))
                    i += 1

        users = [threading.Thread(target=user, args=(u,), daemon=True) for u in range(4)]
        for u in users:
            u.start()
        time.sleep(1.0)
        os.killpg(self.gateway2.pid, signal.SIGKILL)
        self.gateway2.wait()
        for u in users:
            u.join(timeout=30)
        wrong = [(t, got) for t, got, _ in results if got != self.expected[t]]
        slowest = max(s for _, _, s in results)
        print(f"\ngateway 2 SIGKILLed under load (4 clients listing both gateways): {len(results)} "
              f"requests, {len(results) - len(wrong)} ok, slowest {slowest * 1000:.0f} ms", flush=True)
        self.assertGreater(len(results), 20)
        self.assertEqual(wrong, [])
        self.start_gateway2()


if __name__ == "__main__":
    unittest.main(verbosity=2)
