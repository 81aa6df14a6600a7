"""`seqpipe up` with gateway.replicas=2 and batcher.replicas=2: two gateways and two batchers on
consecutive endpoints, every worker serving both batchers and every tokenizer both gateways, and
clients given both gateways. Under load, SIGKILL one gateway, then one batcher: every request is
answered ok (clients fail over; the gateways re-submit a dead batcher's requests).

Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py), PYTHONPATH with clients/python.
"""
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import SEQPIPE, Pipeline, answers, pids  # noqa: E402
from seqpipe_client import Client, SeqpipeError  # noqa: E402


class HubReplicasTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pipeline = Pipeline("seqpipe-replicas-", [
            "gateway.replicas=2", "batcher.replicas=2", "gateway.metrics_port=0", "batcher.metrics_port=0",
            "liveness.heartbeat_interval_ms=100", "liveness.reconnect_max_ms=400",
            "batcher.max_queue_delay_us=1000", "gateway.default_timeout_ms=8000"], owner=cls)
        cls.endpoints = [cls.pipeline.endpoint, cls.pipeline.endpoint.replace("gateway.sock", "gateway-2.sock")]
        cls.clients = [Client(e, timeout_ms=10000) for e in cls.endpoints]
        cls.pipeline.wait_until(lambda: all(answers(c) for c in cls.clients), cls.tearDownClass)

    @classmethod
    def tearDownClass(cls):
        for c in cls.clients:
            c.close()
        cls.pipeline.close()

    def load(self, seconds, fault):
        """4 clients listing both gateways send back to back for `seconds`; fault() runs 1 s in."""
        results, stop_at = [], time.monotonic() + seconds

        def user():
            with Client(self.endpoints, timeout_ms=8000) as client:
                while time.monotonic() < stop_at:
                    try:
                        client.generate("teh speling", max_new_tokens=8, timeout_ms=8000)
                        results.append("ok")
                    except SeqpipeError as e:
                        results.append(e.code)

        users = [threading.Thread(target=user, daemon=True) for _ in range(4)]
        for u in users:
            u.start()
        time.sleep(1.0)
        fault()
        for u in users:
            u.join(timeout=60)
        return results

    def test_1_two_of_each_hub_are_started_and_both_gateways_serve(self):
        run_dir = self.pipeline.run_dir
        self.assertEqual(len(pids(run_dir, "seqpipe-gateway")), 2)
        self.assertEqual(len(pids(run_dir, "seqpipe-batcher")), 2)
        for client in self.clients:
            self.assertEqual(client.generate("hello", max_new_tokens=4)["status"], "ok")
        out = subprocess.run([SEQPIPE, "send", "--set", f"runtime_dir={run_dir}", "--set",
                              "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock", "--set",
                              "gateway.replicas=2", "--set", "gateway.metrics_port=0", "hello"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)

    def test_2_a_gateway_killed_under_load_loses_nothing(self):
        gateway = min(pids(self.pipeline.run_dir, "seqpipe-gateway"))
        results = self.load(3.0, lambda: os.kill(gateway, signal.SIGKILL))
        print(f"\ngateway SIGKILLed under load: {len(results)} requests, {results.count('ok')} ok",
              flush=True)
        self.assertGreater(len(results), 20)
        self.assertEqual([r for r in results if r != "ok"], [])

    def test_3_a_batcher_killed_under_load_loses_nothing(self):
        batcher = min(pids(self.pipeline.run_dir, "seqpipe-batcher"))
        results = self.load(3.0, lambda: os.kill(batcher, signal.SIGKILL))
        print(f"\nbatcher SIGKILLed under load: {len(results)} requests, {results.count('ok')} ok",
              flush=True)
        self.assertGreater(len(results), 20)
        self.assertEqual([r for r in results if r != "ok"], [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
