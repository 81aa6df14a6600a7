"""What the end-to-end and deployment tests share: a model made with seqpipe-mkmodel, a pipeline
started with `seqpipe up` in a temp dir and stopped for sure, free ports, /metrics samples.

Stopped for sure: a pipeline (and a process started with start()) stops with its test class when
the class passes `owner=cls` (a class cleanup, which unittest runs also when setUpClass raises
halfway), else when this test program exits (atexit), and with the test program when it is
killed (PR_SET_PDEATHSIG: a ctest timeout's SIGKILL), so no test leaves a pipeline holding the
metrics ports (9110-9141) for the next.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL.
"""
import atexit
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import json
import urllib.error
import urllib.request

SEQPIPE = os.environ["SEQPIPE_BIN"]
MKMODEL = os.environ["SEQPIPE_MKMODEL"]
# Two replicas of every worker stage, for the tests about replicas (the default is sized from the
# machine's cores: one of each on a small machine).
TWO_OF_EACH = ["tokenizer.replicas=2", "encoder.replicas=2", "decoder.replicas=2",
               "postprocessor.replicas=2"]


# One replica of every stage, metrics on any free port: the repository tests' pipelines.
ONE_REPLICA_EACH = ["gateway.metrics_port=0", "batcher.metrics_port=0", "tokenizer.replicas=1",
                    "encoder.replicas=1", "decoder.replicas=1", "postprocessor.replicas=1"]


def make_tiny_model(out, seed):
    """A tiny random T5 v1.1-shaped model (gated, untied) in `out`; seeds give different models."""
    subprocess.run([MKMODEL, "--preset", "tiny", "--spiece", "--gated", "--untied", "--seed",
                    str(seed), "--out", out], check=True, capture_output=True, timeout=120)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post_json(port, path, body, timeout=20):
    """(status, parsed JSON body) of a POST to the gateway's HTTP front door, as curl sends it."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

def scrape(port, sample):
    """The value of one sample (name with its labels, as exposed) on 127.0.0.1:port/metrics."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in body.splitlines():
        if line.split(" ")[0] == sample:
            return float(line.split(" ")[-1])
    raise AssertionError(f"{sample} not in /metrics on port {port}")


def kserve_stubs(out_dir):
    """The KServe v2 gRPC messages and stub (grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc),
    generated from the gateway's proto into out_dir by python3-grpc-tools."""
    import importlib
    import sys
    from grpc_tools import protoc
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proto_dir = os.path.join(root, "services", "gateway", "proto")
    args = ["protoc", f"-I{proto_dir}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
            os.path.join(proto_dir, "grpc_predict_v2.proto")]
    if protoc.main(args) != 0:
        raise RuntimeError("grpc_tools.protoc failed on grpc_predict_v2.proto")
    sys.path.insert(0, out_dir)
    return (importlib.import_module("grpc_predict_v2_pb2"),
            importlib.import_module("grpc_predict_v2_pb2_grpc"))


def pids(marker, program):
    """The pids of the running `program`s (seqpipe-batcher, ...) whose command line names `marker`
    (a pipeline's run dir)."""
    out = subprocess.run(["pgrep", "-f", f"{program}.*{marker}"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def answers(client):
    """A readiness check for Pipeline.wait_until: a short request goes all the way through."""
    client.generate("warm up", max_new_tokens=2, timeout_ms=2000)
    return True


# The processes start() started and stop() has not stopped yet: stopped at exit.
_running = []


def _die_with_parent(parent):
    """Runs in the child before exec: SIGTERM when the test program dies (PR_SET_PDEATHSIG is 1),
    also when it died already."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def start(args, owner=None, **popen_args):
    """subprocess.Popen(args) in a session of its own, stopped for sure (see the module's doc):
    with `owner`'s class cleanups when given (a TestCase class), else at exit."""
    parent = os.getpid()
    proc = subprocess.Popen(args, start_new_session=True,
                            preexec_fn=lambda: _die_with_parent(parent), **popen_args)
    _running.append(proc)
    if owner is not None:
        owner.addClassCleanup(stop, proc)
    return proc


def stop(proc, timeout=20):
    """SIGTERM, then SIGKILL to the whole process group if it does not stop in time; again, or
    once it exited: nothing."""
    if proc in _running:
        _running.remove(proc)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@atexit.register
def _stop_running():
    for proc in list(_running):
        stop(proc)


class RepositoryTestCase(unittest.TestCase):
    """A test class whose setUpClass makes cls.tmp (the repository's folder), cls.pipeline and
    cls.client, in that order: whatever of them it made is closed and removed once, also when
    setUpClass stopped halfway."""

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "client", None):
            cls.client.close()
        if getattr(cls, "pipeline", None):
            cls.pipeline.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def models(self, *args):
        """`seqpipe models ARGS` against this class's pipeline."""
        return subprocess.run([SEQPIPE, "models", *args, "--set",
                               f"runtime_dir={self.pipeline.run_dir}"],
                              capture_output=True, text=True, timeout=240)

    def state(self):
        """{(name, version): (state, reason)} from `seqpipe models list`."""
        out = self.models("list")
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = {}
        for line in out.stdout.splitlines()[1:]:
            name, version, state, *reason = line.split(maxsplit=3)
            rows[(name, version)] = (state, " ".join(reason))
        return rows


class PipelineTestCase(unittest.TestCase):
    """A test class on one pipeline, started once for all its tests: the class gives PREFIX,
    settings() (--set overrides), CONFIG (a config file) and, to serve a model of its own, MODEL_DIR
    (or CHECKOUT: see Pipeline); setUpClass starts it,
    with `cls.client` (the Python client, CLIENT_TIMEOUT_MS) on its gateway, and returns once a
    request goes all the way through."""
    PREFIX = "seqpipe-e2e-"
    MODEL_DIR = None
    CHECKOUT = None
    MODEL_ARGS = ()  # extra seqpipe-mkmodel options for the tiny model it makes
    CONFIG = None  # a config file to start from (--config)
    CLIENT_TIMEOUT_MS = 10000

    @classmethod
    def settings(cls):
        return []

    @classmethod
    def setUpClass(cls):
        from seqpipe_client import Client  # (clients/python, on the e2e tests' PYTHONPATH)
        cls.pipeline = Pipeline(cls.PREFIX, cls.settings(), model_dir=cls.MODEL_DIR,
                                checkout=cls.CHECKOUT, model_args=cls.MODEL_ARGS, config=cls.CONFIG,
                                owner=cls)
        cls.client = Client(cls.pipeline.endpoint, timeout_ms=cls.CLIENT_TIMEOUT_MS)
        cls.pipeline.wait_until(lambda: answers(cls.client))

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.pipeline.close()


class Pipeline:
    """`seqpipe up` on a fresh tiny model (gated, untied, with spiece.model) in a temp dir, its
    client socket on ipc:// in the run dir. `settings` are extra --set overrides; `model_dir` serves
    that model directory instead. `checkout`: run in that source checkout as a newcomer does, its
    config/pipeline.yaml and bundled model as they are (only the sockets and ports moved).
    `config`: a config file to start from (--config). `owner`: the TestCase class whose class
    cleanups close it (also when its setUpClass raises after this); none: closed at exit."""

    def __init__(self, prefix, settings=(), gated=True, model_dir=None, checkout=None, config=None,
                 model_args=(), owner=None):
        self.proc = None
        self.log = None
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        if owner is not None:
            owner.addClassCleanup(self.close)
        self.model = model_dir or os.path.join(self.tmp, "model")
        if model_dir is None and checkout is None:
            args = [MKMODEL, "--preset", "tiny", "--spiece", "--seed", "3", "--out", self.model]
            if gated:
                args += ["--gated", "--untied"]
            args += list(model_args)
            subprocess.run(args, check=True, capture_output=True, timeout=120)
        self.run_dir = os.path.join(self.tmp, "run")
        self.endpoint = f"ipc://{self.run_dir}/gateway.sock"
        up = [SEQPIPE, "up"] + (["--config", config] if config else [])
        model = [] if checkout else [f"model.dir={self.model}"]
        for s in [*model, f"runtime_dir={self.run_dir}",
                  "gateway.client_endpoint=ipc://{runtime_dir}/gateway.sock",
                  "gateway.http_endpoint=127.0.0.1:0", *settings]:
            up += ["--set", s]
        self.log = open(os.path.join(self.tmp, "up.log"), "w")
        self.proc = start(up, stdout=self.log, stderr=subprocess.STDOUT, cwd=checkout or self.tmp)

    def alive(self):
        return self.proc.poll() is None

    def wait_until(self, ready, on_fail=None, timeout=60):
        """Polls ready() (an exception counts as not yet) until it is true. If the pipeline exits or
        `timeout` seconds pass first, calls on_fail() when given (the test class's teardown; a
        pipeline with an owner is closed by its cleanups) and raises."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if ready():
                    return
            except Exception:  # noqa: BLE001  (not up yet: connection refused, unavailable, ...)
                pass
            if time.monotonic() > deadline or not self.alive():
                with open(self.log.name) as log:  # before on_fail removes it
                    tail = "".join(log.readlines()[-20:])
                if on_fail is not None:
                    on_fail()
                raise RuntimeError(f"pipeline did not come up; the end of {self.log.name}:\n{tail}")
            time.sleep(0.2)

    def metrics_ports(self, stage, replicas, timeout=30):
        """The /metrics ports of the stage's `replicas` running replicas, as each logged the one it
        got ("[seqpipe-decoder PID] ... decoder: metrics on :PORT", the hubs' start line ending
        "metrics on :PORT" too; a restarted replica logs its
        new one), waiting for them to start. Guessing them from the configured base is a race: a
        port after the base may be held by another socket, and a replica still loading its model
        listens on none."""
        pattern = re.compile(rf"\[seqpipe-{stage} (\d+)\].* {stage}: .*metrics on :(\d+)")
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log.name) as log:
                ports = {int(pid): int(port) for pid, port in pattern.findall(log.read())}
            running = [port for pid, port in ports.items() if os.path.exists(f"/proc/{pid}")]
            if len(running) == replicas:
                return running
            if time.monotonic() > deadline or not self.alive():
                raise AssertionError(f"{len(running)} running {stage} replicas logged a metrics "
                                     f"port, not {replicas}; see {self.log.name}")
            time.sleep(0.1)

    def samples(self, stage, replicas, sample):
        """One /metrics sample (as scrape() names it) from each of the stage's running replicas."""
        return [scrape(port, sample) for port in self.metrics_ports(stage, replicas)]

    def close(self):
        """Stops the pipeline and removes its folder; again (or after a failed start): nothing."""
        if self.proc is not None:
            stop(self.proc)
        if self.log is not None:
            self.log.close()
        if os.environ.get("SEQPIPE_KEEP_E2E") is None:
            shutil.rmtree(self.tmp, ignore_errors=True)
