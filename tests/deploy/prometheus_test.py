"""A real Prometheus (Debian's `prometheus`) scrapes a running pipeline with the scrape config
from deploy/prometheus/prometheus.yml (scrape interval shortened to 1 s for the test). Checks,
through Prometheus' HTTP API: every running process is an `up` target; the gateway's request
counter moved by exactly the number of requests sent; histogram_quantile over the gateway
latency histogram returns a number.

Skips (exit 0 with a message) only when the prometheus binary is not installed.
Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py); PYTHONPATH has clients/python.
"""
import json
import os
import shutil
import subprocess
import sys
import time
import unittest
import urllib.parse
import urllib.request

from seqpipe_client import Client

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
from harness import TWO_OF_EACH, Pipeline, answers, free_port, stop  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMETHEUS = shutil.which("prometheus")


class PrometheusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The default metrics ports, which the deploy scrape config lists; two replicas each, set
        # (the default sizes them from the cores).
        cls.pipeline = Pipeline("seqpipe-prom-", settings=TWO_OF_EACH, gated=False, owner=cls)
        cls.tmp, cls.endpoint = cls.pipeline.tmp, cls.pipeline.endpoint
        with open(os.path.join(SOURCE, "deploy/prometheus/prometheus.yml")) as f:
            config = f.read().replace("scrape_interval: 5s", "scrape_interval: 1s")
        config_path = os.path.join(cls.tmp, "prometheus.yml")
        with open(config_path, "w") as f:
            f.write(config)
        cls.prom_port = free_port()
        cls.prom_log = open(os.path.join(cls.tmp, "prometheus.log"), "w")
        cls.prom = subprocess.Popen([PROMETHEUS, f"--config.file={config_path}",
                                     f"--storage.tsdb.path={cls.tmp}/tsdb",
                                     f"--web.listen-address=127.0.0.1:{cls.prom_port}"],
                                    stdout=cls.prom_log, stderr=subprocess.STDOUT, start_new_session=True)
        cls.client = Client(cls.endpoint, timeout_ms=10000)
        cls.pipeline.wait_until(lambda: answers(cls.client), cls.tearDownClass)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        stop(cls.prom)
        cls.prom_log.close()
        cls.pipeline.close()

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.prom_port}/api/v1/{path}?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        self.assertEqual(body["status"], "success", body)
        return body["data"]

    def query_value(self, expr):
        result = self.api("query", query=expr)["result"]
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, what, predicate, within_s=30):
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        self.fail(f"timed out waiting for {what}")

    def test_prometheus_scrapes_the_pipeline(self):
        def up_stages():
            targets = self.api("targets")["activeTargets"]
            return {t["labels"]["stage"] for t in targets if t["health"] == "up"}
        stages = self.wait_for("every stage up", lambda: up_stages() if len(up_stages()) == 6 else None)
        self.assertEqual(stages, {"gateway", "batcher", "tokenizer", "encoder", "decoder", "postprocessor"})
        # Two replicas each: 2 tokenizers etc. are up targets, plus the hubs.
        self.wait_for("10 targets up", lambda: self.query_value('count(up{job="seqpipe"} == 1)') == 10.0)

        counter = 'sum(seqpipe_gateway_request_seconds_count{job="seqpipe"})'
        before = self.wait_for("the gateway counter", lambda: self.query_value(counter) is not None and
                               self.query_value(counter))
        n = 25
        for i in range(n):
            self.client.generate(f"request number {i}", max_new_tokens=4)
        self.wait_for(f"the counter to move by {n}", lambda: self.query_value(counter) == before + n)
        q = self.wait_for("a p99", lambda: self.query_value(
            'histogram_quantile(0.99, sum by (le) (rate(seqpipe_gateway_request_seconds_bucket{status="ok"}[30s])))'))
        self.assertGreater(q, 0.0)
        self.assertLess(q, 5.0)
        print(f"\nprometheus: counter {before} -> {before + n}, gateway p99 {q * 1000:.2f} ms", flush=True)


if __name__ == "__main__":
    if PROMETHEUS is None:
        print("SKIP: the prometheus binary is not installed (Debian package `prometheus`)")
        sys.exit(0)
    unittest.main(verbosity=2)
