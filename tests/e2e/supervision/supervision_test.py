"""`seqpipe up` as a supervisor: its children die with it, it checks the model directory before
starting anything, and a child that cannot start stops the pipeline with the error instead of
being restarted forever; a port in use (client, HTTP, metrics) stops it at once, naming the key;
engine threads that outnumber the cores get a short OpenMP spin unless the user set a wait.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL (tests/e2e/harness.py).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import MKMODEL, SEQPIPE, TWO_OF_EACH, Pipeline, answers, pids  # noqa: E402
from seqpipe_client import Client  # noqa: E402


def processes_with(marker):
    """PIDs of the processes whose command line contains `marker` (our run dir)."""
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def up(args, timeout):
    """Runs `seqpipe up ARGS` to its end; returns (exit status, seconds, output)."""
    start = time.monotonic()
    proc = subprocess.run([SEQPIPE, "up", *args], capture_output=True, text=True, timeout=timeout,
                          start_new_session=True)
    return proc.returncode, time.monotonic() - start, proc.stdout + proc.stderr


class ChildrenDieWithUpTest(unittest.TestCase):
    def test_sigkill_of_up_stops_every_child(self):
        pipeline = Pipeline("seqpipe-supervision-", ["gateway.metrics_port=0",
                                                      "batcher.metrics_port=0", *TWO_OF_EACH])
        try:
            client = Client(pipeline.endpoint)
            pipeline.wait_until(lambda: answers(client), pipeline.close)
            children = processes_with(pipeline.run_dir)
            children.remove(pipeline.proc.pid)
            self.assertEqual(len(children), 10, "gateway, batcher and 2 of each worker stage")
            os.kill(pipeline.proc.pid, signal.SIGKILL)
            pipeline.proc.wait()
            deadline = time.monotonic() + 15
            while processes_with(pipeline.run_dir) and time.monotonic() < deadline:
                time.sleep(0.1)
            self.assertEqual(processes_with(pipeline.run_dir), [], "orphans outlived seqpipe up")
        finally:
            for pid in processes_with(pipeline.run_dir):
                os.kill(pid, signal.SIGKILL)
            pipeline.close()


class ComputeTypeTest(unittest.TestCase):
    def test_an_int8_pipeline_answers_and_an_unknown_type_stops_it(self):
        pipeline = Pipeline("seqpipe-int8-", ["gateway.metrics_port=0", "batcher.metrics_port=0",
                                              "model.compute_type=int8", "decoder.compute_type=bfloat16"])
        try:
            client = Client(pipeline.endpoint)
            pipeline.wait_until(lambda: answers(client), pipeline.close)
            self.assertEqual(client.generate("teh speling", max_new_tokens=6)["status"], "ok")
            client.close()
            self.check_bad_model_setting_stops(pipeline, "model.compute_type=int4",
                                               "model.compute_type: unknown compute type 'int4'")
            # A GPU that is not there (no machine here has eight; CI has none, or a build
            # without CUDA): the encoder and decoder say which, and `seqpipe up` stops.
            self.check_bad_model_setting_stops(pipeline, "model.device=cuda:7",
                                               "model.device: device cuda:7: ")
        finally:
            pipeline.close()

    def check_bad_model_setting_stops(self, pipeline, setting, message):
        status, _, output = up(["--set", f"model.dir={pipeline.model}", "--set", setting,
                                "--set", f"runtime_dir={pipeline.tmp}/run2",
                                "--set", "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock",
                                "--set", "gateway.metrics_port=0", "--set", "batcher.metrics_port=0",
                                "--set", "gateway.http_endpoint=127.0.0.1:0"], timeout=60)
        self.assertEqual(status, 1, output)
        self.assertIn(message, output)
        self.assertIn("(bad usage or config): stopping the pipeline", output)


class StartFailureTest(unittest.TestCase):
    def test_missing_model_dir_is_refused_before_starting(self):
        status, seconds, output = up(["--set", "model.dir=/nonexistent/model"], timeout=30)
        self.assertEqual(status, 2, output)
        self.assertIn("model.dir: '/nonexistent/model' is not a directory", output)
        self.assertNotIn("processes;", output, "nothing is started")
        self.assertLess(seconds, 10)

    def test_a_model_that_does_not_load_stops_the_pipeline_at_once(self):
        with tempfile.TemporaryDirectory(prefix="seqpipe-supervision-") as tmp:
            # The files are there, but config.json is no T5 config and spiece.model is empty: each
            # stage says why and exits with the config status, so none is started again (it
            # would fail the same way; a child that keeps exiting otherwise is restarted up to
            # the start limit, tests/tools/child_processes_test.cc).
            model = os.path.join(tmp, "model")
            os.makedirs(model)
            with open(os.path.join(model, "config.json"), "w") as f:
                json.dump({"model_type": "not-t5"}, f)
            for name in ("model.safetensors", "spiece.model"):
                open(os.path.join(model, name), "w").close()
            status, seconds, output = up(
                ["--set", f"model.dir={model}", "--set", f"runtime_dir={tmp}/run",
                 "--set", "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock",
                 "--set", "gateway.metrics_port=0", "--set", "batcher.metrics_port=0"],
                timeout=90)
            self.assertEqual(status, 1, output)
            self.assertIn(f"model.dir {model} does not load: ", output)
            self.assertRegex(output, r"(tokenizer|encoder|decoder|postprocessor) #0 exited with "
                             r"status 2 \(bad usage or config\): stopping the pipeline")
            self.assertNotIn("restarting", output)
            self.assertIn("seqpipe up: stopped", output)
            self.assertEqual(processes_with(f"{tmp}/run"), [], "children left behind")


class PortInUseTest(unittest.TestCase):
    """A port someone else listens on is a start-up error naming the config key and the address,
    and `seqpipe up` stops at once instead of restarting the gateway into the same wall."""

    def test_each_of_the_gateways_ports_in_use_stops_up_at_once(self):
        with tempfile.TemporaryDirectory(prefix="seqpipe-port-in-use-") as tmp:
            model = os.path.join(tmp, "model")
            subprocess.run([MKMODEL, "--preset", "tiny", "--spiece", "--out", model], check=True,
                           capture_output=True, timeout=120)
            with socket.socket() as busy:
                busy.bind(("127.0.0.1", 0))
                busy.listen()
                port = busy.getsockname()[1]
                for key, value in [("gateway.client_endpoint", f"tcp://127.0.0.1:{port}"),
                                   ("gateway.http_endpoint", f"127.0.0.1:{port}"),
                                   ("gateway.metrics_port", f"{port}")]:
                    with self.subTest(key=key):
                        settings = {"model.dir": model, "runtime_dir": f"{tmp}/run",
                                    "gateway.client_endpoint": "ipc://{runtime_dir}/gateway.sock",
                                    "gateway.http_endpoint": "127.0.0.1:0",
                                    "gateway.metrics_port": "0", "batcher.metrics_port": "0",
                                    key: value}
                        args = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
                        status, seconds, output = up(args, timeout=60)
                        self.assertEqual(status, 1, output)
                        self.assertIn(f"{key}: 127.0.0.1:{port} is in use"
                                      if key != "gateway.client_endpoint"
                                      else f"{key}: tcp://127.0.0.1:{port} is in use", output)
                        self.assertIn("(bad usage or config): stopping the pipeline", output)
                        self.assertNotIn("restarting", output)
                        self.assertLess(seconds, 10)


class OpenMpWaitTest(unittest.TestCase):
    """Engine threads that outnumber the cores get a short OpenMP spin; a wait the user set is
    kept (libgomp reads these as a process starts: the children's environment carries them)."""

    WAITS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

    def decoder_waits(self, user_env):
        saved = {k: os.environ.pop(k, None) for k in self.WAITS}
        os.environ.update(user_env)
        cores = os.cpu_count()
        try:  # both stages on every core: more engine threads than cores on any machine
            pipeline = Pipeline("seqpipe-omp-", ["gateway.metrics_port=0", "batcher.metrics_port=0",
                                                 "encoder.replicas=1", "decoder.replicas=1",
                                                 f"encoder.threads={cores}",
                                                 f"decoder.threads={cores}"])
        finally:
            for k in self.WAITS:
                os.environ.pop(k, None)
            os.environ.update({k: v for k, v in saved.items() if v is not None})
        try:
            client = Client(pipeline.endpoint)
            pipeline.wait_until(lambda: answers(client), pipeline.close)
            client.close()
            [decoder] = pids(pipeline.run_dir, "seqpipe-decoder")
            with open(f"/proc/{decoder}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            with open(pipeline.log.name) as log:
                said = [line for line in log if "OpenMP waits:" in line]
            return ({k: env[k.encode()].decode() for k in self.WAITS if k.encode() in env},
                    said)
        finally:
            pipeline.close()

    def test_oversubscribed_engine_threads_spin_briefly_and_a_users_wait_is_kept(self):
        waits, said = self.decoder_waits({})
        self.assertEqual(waits, {"GOMP_SPINCOUNT": "3000"})
        self.assertTrue(said and said[0].rstrip().endswith("OpenMP waits: GOMP_SPINCOUNT=3000"),
                        said)
        waits, said = self.decoder_waits({"OMP_WAIT_POLICY": "passive"})
        self.assertEqual(waits, {"OMP_WAIT_POLICY": "passive"})
        self.assertTrue(said and said[0].rstrip().endswith("OpenMP waits: OMP_WAIT_POLICY=passive"),
                        said)


class SendWithoutPipelineTest(unittest.TestCase):
    def test_send_says_at_once_that_no_pipeline_answers(self):
        with tempfile.TemporaryDirectory(prefix="seqpipe-send-") as tmp:
            endpoint = f"ipc://{tmp}/gateway.sock"
            start = time.monotonic()
            proc = subprocess.run([SEQPIPE, "send", "--set", f"runtime_dir={tmp}", "--set",
                                   f"gateway.client_endpoint={endpoint}", "teh speling"],
                                  capture_output=True, text=True, timeout=30)
            seconds = time.monotonic() - start
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn(f"no connection to {endpoint} within 1000 ms", proc.stderr)
        self.assertIn("seqpipe up", proc.stderr)
        self.assertLess(seconds, 5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
