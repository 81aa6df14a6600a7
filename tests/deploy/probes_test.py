"""What an orchestrator needs of the processes, on a real pipeline (`seqpipe up`, 2 decoders):
  - every process answers /healthz (200) and /ready (200 once it serves its part) on its
    metrics port;
  - the batcher exports per-stage queue gauges, and every seqpipe_* metric that deploy/k8s's
    autoscalers (KEDA ScaledObjects, the prometheus-adapter rules) name is really exported;
  - a decoder stopped with SIGTERM under load drains: every request answered ok, none lost, the
    batcher re-dispatched nothing and declared nobody dead, and counted one drain.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL (tests/e2e/harness.py).
"""
import glob
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e", "faults"))
from harness import Pipeline, scrape  # noqa: E402
from faults_test import TIMEOUT_MS, Load  # noqa: E402

STAGES = {"gateway": 1, "batcher": 1, "tokenizer": 1, "encoder": 1, "decoder": 2,
          "postprocessor": 1}


def get(port, path):
    """(status, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def autoscaler_metric_names():
    """Every seqpipe_* name in the queries of deploy/k8s's ScaledObjects and adapter rules."""
    names = set()
    for path in glob.glob(os.path.join(ROOT, "deploy", "k8s", "**", "*.yaml"), recursive=True):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if not isinstance(doc, dict):
                    continue
                if doc.get("kind") == "ScaledObject":
                    for trigger in doc["spec"]["triggers"]:
                        names.update(re.findall(r"seqpipe_[a-z_]+", trigger["metadata"]["query"]))
                if doc.get("kind") == "ConfigMap" and "config.yaml" in doc.get("data", {}):
                    names.update(re.findall(r"seqpipe_[a-z_]+", doc["data"]["config.yaml"]))
    return names


class ProbesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        settings = [f"{stage}.metrics_port=0" for stage in STAGES]
        settings += [f"{stage}.replicas={n}" for stage, n in STAGES.items()
                     if stage not in ("gateway", "batcher")]
        settings += ["decoder.num_slots=8", f"gateway.default_timeout_ms={TIMEOUT_MS}"]
        cls.pipeline = Pipeline("seqpipe-probes-", settings, owner=cls)
        cls.run_dir, cls.endpoint = cls.pipeline.run_dir, cls.pipeline.endpoint
        cls.pipeline.wait_until(cls._answers, cls.tearDownClass, timeout=90)

    @classmethod
    def _answers(cls):
        load = Load(cls.endpoint, 1, 1)
        load._run()
        return any(status == "ok" for status, _, _ in load.replies.get("r0", []))

    @classmethod
    def tearDownClass(cls):
        cls.pipeline.close()

    def ports(self, stage):
        return self.pipeline.metrics_ports(stage, STAGES[stage])

    def wait_ready(self, port, within_s=20):
        deadline = time.monotonic() + within_s
        while True:
            status, body = get(port, "/ready")
            if status == 200 or time.monotonic() > deadline:
                return status, body
            time.sleep(0.1)

    def test_every_process_answers_health_and_readiness(self):
        for stage in STAGES:
            for port in self.ports(stage):
                status, body = get(port, "/healthz")
                self.assertEqual((status, body), (200, "ok\n"), f"{stage} :{port}/healthz")
                status, body = self.wait_ready(port)
                self.assertEqual((status, body), (200, "ready\n"), f"{stage} :{port}/ready")

    def test_per_stage_queue_gauges_and_the_autoscalers_metrics_are_exported(self):
        batcher = self.ports("batcher")[0]
        for stage in ("encoder", "decoder", "postprocessor"):
            for name in ("seqpipe_batcher_stage_queue_depth", "seqpipe_batcher_stage_queue_wait_seconds"):
                self.assertGreaterEqual(scrape(batcher, f'{name}{{stage="{stage}"}}'), 0)
        exported = "".join(get(port, "/metrics")[1] for stage in STAGES for port in self.ports(stage))
        wanted = autoscaler_metric_names()
        self.assertIn("seqpipe_batcher_stage_queue_depth", wanted, "deploy/k8s scales on per-stage queues")
        missing = sorted(name for name in wanted if name not in exported)
        self.assertEqual(missing, [], "metrics deploy/k8s's autoscalers name that no process exports")
        print(f"\nautoscaler metrics, all exported: {sorted(wanted)}", flush=True)

    def test_sigterm_drains_a_decoder_under_load_without_a_redispatch(self):
        batcher = self.ports("batcher")[0]
        samples = {name: f'{name}{{stage="batcher"}}' for name in (
            "seqpipe_hub_items_redispatched_total", "seqpipe_hub_workers_declared_dead_total",
            "seqpipe_hub_workers_drained_total")}
        before = {name: scrape(batcher, s) for name, s in samples.items()}
        out = subprocess.run(["pgrep", "-f", f"seqpipe-decoder .*{self.run_dir}"], capture_output=True, text=True)
        victim = int(out.stdout.split()[0])
        load = Load(self.endpoint, 300, 60).start()
        time.sleep(1.0)
        os.kill(victim, signal.SIGTERM)
        stopped = time.monotonic()
        deadline = stopped + 20
        while os.path.exists(f"/proc/{victim}") and time.monotonic() < deadline:
            try:
                with open(f"/proc/{victim}/stat") as f:
                    if f.read().split(") ")[1].startswith("Z"):  # exited; seqpipe up reaps it
                        break
            except FileNotFoundError:
                break
            time.sleep(0.02)
        drain_s = time.monotonic() - stopped
        load.join()
        time.sleep(4)  # the batcher forgets the drained decoder after 3 missed heartbeats of 1 s
        after = {name: scrape(batcher, s) for name, s in samples.items()}
        print(f"\nSIGTERM one of 2 decoders under 60 req/s: exited after {drain_s:.2f} s; "
              f"{load.figures()}; batcher counters {before} -> {after}", flush=True)
        self.assertLess(drain_s, 20, "the decoder did not exit")
        self.assertEqual([rid for rid in load.sent if rid not in load.replies], [], "lost requests")
        first = [answers[0][0] for answers in load.replies.values()]
        self.assertEqual(first.count("ok"), load.count, load.summary())
        self.assertEqual(after["seqpipe_hub_items_redispatched_total"],
                         before["seqpipe_hub_items_redispatched_total"], "re-dispatched items")
        self.assertEqual(after["seqpipe_hub_workers_declared_dead_total"],
                         before["seqpipe_hub_workers_declared_dead_total"], "a drained decoder counted dead")
        self.assertEqual(after["seqpipe_hub_workers_drained_total"],
                         before["seqpipe_hub_workers_drained_total"] + 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
