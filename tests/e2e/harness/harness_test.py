"""The e2e harness stops what it started however a test ends (tests/e2e/harness.py): a pipeline
whose test class's setUpClass raises after starting it, one left open when the test program
exits, and one whose test program is SIGKILLed (a ctest timeout) all stop, every process of
theirs (`seqpipe up` and its hubs and workers), so none holds the metrics ports for the next test.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL (tests/e2e/harness.py).
"""
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import unittest

E2E = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, E2E)
from harness import Pipeline, pids  # noqa: E402

# A test program that starts a pipeline, says its run dir and folder, and waits for its gateway
# to start; then exits without closing it, or waits to be killed (`how`).
CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {e2e!r})
    from harness import Pipeline, pids
    pipeline = Pipeline("seqpipe-harness-child-")
    print(pipeline.run_dir, pipeline.tmp, flush=True)
    deadline = time.monotonic() + 60
    while not pids(pipeline.run_dir, "seqpipe-gateway") and time.monotonic() < deadline:
        time.sleep(0.1)
    print("started", flush=True)
    if {how!r} == "wait":
        time.sleep(600)
""")


def running(run_dir):
    """The pids of every process of the pipeline on run_dir (`seqpipe up`, hubs, workers)."""
    return pids(run_dir, "seqpipe")


def wait_gone(run_dir, timeout=30):
    deadline = time.monotonic() + timeout
    while running(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    return running(run_dir)


def wait_started(run_dir, timeout=60):
    deadline = time.monotonic() + timeout
    while not pids(run_dir, "seqpipe-gateway") and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids(run_dir, "seqpipe-gateway")


class HarnessTest(unittest.TestCase):
    def test_a_failed_setup_stops_its_pipeline(self):
        class SetupFails(unittest.TestCase):
            """Starts a pipeline, then its setUpClass raises (as a failed readiness check would)."""
            started = None

            @classmethod
            def setUpClass(cls):
                pipeline = Pipeline("seqpipe-harness-", owner=cls)
                cls.started = (pipeline.run_dir, pipeline.tmp)
                if not wait_started(pipeline.run_dir):
                    raise AssertionError("no gateway started; see " + pipeline.log.name)
                raise RuntimeError("a setup that fails after starting its pipeline")

            def test_never_runs(self):
                pass

        result = unittest.TestResult()
        unittest.defaultTestLoader.loadTestsFromTestCase(SetupFails).run(result)
        self.assertEqual(result.testsRun, 0)
        self.assertEqual(len(result.errors), 1)
        self.assertIn("a setup that fails after starting its pipeline", result.errors[0][1])
        run_dir, tmp = SetupFails.started
        self.assertEqual(running(run_dir), [])  # stopped before the run returned
        self.assertFalse(os.path.exists(tmp))

    def child(self, how):
        """Runs CHILD (`how`), returns it with its pipeline's run dir, once its gateway started."""
        proc = subprocess.Popen([sys.executable, "-c", CHILD.format(e2e=E2E, how=how)],
                                stdout=subprocess.PIPE, text=True, env=os.environ)
        run_dir, tmp = proc.stdout.readline().split()
        self.addCleanup(shutil.rmtree, tmp, True)
        self.assertEqual(proc.stdout.readline().strip(), "started")
        self.assertTrue(running(run_dir))
        return proc, run_dir

    def test_a_pipeline_left_open_stops_when_its_program_exits(self):
        proc, run_dir = self.child("exit")
        proc.wait(timeout=60)
        self.assertEqual(running(run_dir), [])

    def test_a_pipeline_stops_when_its_program_is_killed(self):
        proc, run_dir = self.child("wait")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        self.assertEqual(wait_gone(run_dir), [])


if __name__ == "__main__":
    unittest.main()
