"""`seqpipe up` with one gateway and one batcher and the default heartbeats (1 s): SIGKILL the
batcher under load. `seqpipe up` starts it again; the workers see their connection drop and join
the new batcher at once; the gateway hears the new batcher's incarnation in its heartbeat and
submits what the old one held again, once; the new batcher drops the copies the tokenizers had
queued for it. From the clients' view: every request answered ok, none twice, none slower than
2 s. The figures printed are those of docs/RELIABILITY.md.

Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py), PYTHONPATH with clients/python.
"""
import os
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import PipelineTestCase, free_port, pids, scrape  # noqa: E402
from seqpipe_client import Client, SeqpipeError  # noqa: E402

USERS = 4
SECONDS = 5.0
KILL_AT = 1.5


class BatcherRestartTest(PipelineTestCase):
    PREFIX = "seqpipe-restart-"

    @classmethod
    def settings(cls):
        cls.gateway_metrics = free_port()
        return [f"gateway.metrics_port={cls.gateway_metrics}", "batcher.metrics_port=0",
                "batcher.max_queue_delay_us=1000", "gateway.default_timeout_ms=8000"]

    def test_a_batcher_killed_under_load_loses_nothing_and_stalls_under_2_s(self):
        run_dir = self.pipeline.run_dir
        [batcher] = pids(run_dir, "seqpipe-batcher")
        results, stop_at = [], time.monotonic() + SECONDS  # (status, seconds)
        duplicates = []

        def user():
            # No client-side retry: every request goes once, so what comes back twice would be the
            # pipeline's doing.
            with Client(self.pipeline.endpoint, timeout_ms=8000, retry_after_ms=0) as client:
                while time.monotonic() < stop_at:
                    start = time.monotonic()
                    try:
                        client.generate("teh speling", max_new_tokens=8, timeout_ms=8000)
                        results.append(("ok", time.monotonic() - start))
                    except SeqpipeError as e:
                        results.append((e.code, time.monotonic() - start))
                    time.sleep(0.04)  # ~20 requests/s per user
                client.generate("last", max_new_tokens=2)  # takes in any second answer
                duplicates.append(client.duplicates_dropped)

        users = [threading.Thread(target=user, daemon=True) for _ in range(USERS)]
        for u in users:
            u.start()
        time.sleep(KILL_AT)
        os.kill(batcher, signal.SIGKILL)
        killed = time.monotonic()
        for u in users:
            u.join(timeout=60)
        restarted = pids(run_dir, "seqpipe-batcher")
        ok = [s for status, s in results if status == "ok"]
        late = scrape(self.gateway_metrics, "seqpipe_gateway_late_results_total")
        print(f"\nlone batcher SIGKILLed under load ({USERS} users): {len(results)} sent, {len(ok)} ok, "
              f"{len(results) - len(ok)} failed, {sum(duplicates)} answered twice, slowest "
              f"{max(s for _, s in results) * 1000:.0f} ms, late results dropped at the gateway "
              f"{late:.0f}; restarted as pid {restarted} ({time.monotonic() - killed:.1f} s ago)",
              flush=True)
        self.assertEqual(len(restarted), 1)
        self.assertNotEqual(restarted[0], batcher)
        self.assertGreater(len(results), 40)
        self.assertEqual([r for r in results if r[0] != "ok"], [])
        self.assertEqual(sum(duplicates), 0)
        self.assertLess(max(s for _, s in results), 2.0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
