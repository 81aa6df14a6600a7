"""CurveZMQ end to end, real processes over real sockets: `seqpipe up` with keys made by
`seqpipe keygen`; a client or a worker whose key is in the hubs' allow list is served, one with
another key (or none) gets no replies and no work, and the refusal is logged and counted; a hub
that would bind beyond loopback without keys does not start; a secret key file others may read
is refused.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL (tests/e2e/harness.py).
"""
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import MKMODEL, SEQPIPE, TWO_OF_EACH, Pipeline, answers, free_port, scrape, stop  # noqa: E402
from seqpipe_client import Client, SeqpipeError  # noqa: E402

BUILD = os.path.dirname(os.path.dirname(SEQPIPE))


def service(name):
    return os.path.join(BUILD, "services", name, f"seqpipe-{name}")


def make_keys(directory):
    """hub, worker, client and stranger key pairs; the allow list holds worker and client."""
    subprocess.run([SEQPIPE, "keygen", "--dir", directory, "hub", "worker", "client", "stranger"],
                   check=True, capture_output=True, timeout=30)
    allowed = os.path.join(directory, "allowed")
    os.mkdir(allowed)
    for name in ["worker", "client"]:
        shutil.copy(os.path.join(directory, name), allowed)
    return allowed


def security_settings(keys, client_key="worker"):
    return [f"security.server_key={keys}/hub", f"security.client_key={keys}/{client_key}",
            f"security.allowed_clients={keys}/allowed"]


class CurvePipelineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.keys = tempfile.mkdtemp(prefix="seqpipe-keys-")
        make_keys(cls.keys)
        cls.metrics_port = free_port()
        cls.endpoint = f"tcp://127.0.0.1:{free_port()}"
        cls.settings = [f"gateway.client_endpoint={cls.endpoint}",
                        f"gateway.metrics_port={cls.metrics_port}", "batcher.metrics_port=0",
                        "tokenizer.metrics_port=0", "encoder.metrics_port=0",
                        "decoder.metrics_port=0", "postprocessor.metrics_port=0",
                        *security_settings(cls.keys), *TWO_OF_EACH]
        cls.pipeline = Pipeline("seqpipe-security-", cls.settings, owner=cls)
        client = cls.client("client")
        cls.pipeline.wait_until(lambda: answers(client), cls.tearDownClass)
        client.close()

    @classmethod
    def tearDownClass(cls):
        cls.pipeline.close()
        shutil.rmtree(cls.keys, ignore_errors=True)

    @classmethod
    def client(cls, key, **options):
        return Client(cls.endpoint, server_key=f"{cls.keys}/hub", client_key=f"{cls.keys}/{key}",
                      **options)

    def refusals(self):
        return scrape(self.metrics_port, 'seqpipe_security_refusals_total{hub="gateway"}')

    def cli(self, command, key, *args):
        """`seqpipe COMMAND` with the pipeline's config and `key` as its client key."""
        settings = [f"runtime_dir={self.pipeline.run_dir}",
                    *security_settings(self.keys, key)]
        line = [SEQPIPE, command, *[a for s in settings for a in ("--set", s)], *args]
        return subprocess.run(line, capture_output=True, text=True, timeout=60)

    def up_log(self):
        with open(self.pipeline.log.name) as f:
            return f.read()

    def test_an_allowed_client_is_served_another_key_or_none_gets_no_reply(self):
        with self.client("client") as allowed:
            self.assertEqual(allowed.generate("teh speling", max_new_tokens=6)["status"], "ok")
        before = self.refusals()
        for stranger in [self.client("stranger", timeout_ms=1500, max_attempts=1),
                         Client(self.endpoint, timeout_ms=1500, max_attempts=1)]:
            with stranger:
                with self.assertRaises(SeqpipeError) as raised:
                    stranger.generate("teh speling", max_new_tokens=6)
                self.assertEqual(raised.exception.code, "unavailable")
        # The stranger's handshake was refused by the gateway's ZAP handler, counted and logged
        # (a plain-text client fails earlier, at the mechanism, and is not a ZAP refusal).
        self.assertGreater(self.refusals(), before)
        with open(f"{self.keys}/stranger") as f:
            stranger_key = re.search(r'public-key = "(.{40})"', f.read()).group(1)
        self.assertIn(f"client key {stranger_key} is not in the allow list", self.up_log())

    def test_seqpipe_send_and_status_use_the_configured_client_key(self):
        sent = self.cli("send", "client", "--endpoint", self.endpoint, "--max-new-tokens", "6",
                        "--timeout-ms", "5000", "hello world")
        self.assertEqual(sent.returncode, 0, sent.stderr)
        self.assertIn("timings (us):", sent.stdout)
        status = self.cli("status", "client")
        self.assertEqual(status.returncode, 0, status.stdout + status.stderr)
        self.assertIn("ready: yes", status.stdout)

        refused = self.cli("send", "stranger", "--endpoint", self.endpoint, "--timeout-ms", "1000",
                           "hello world")
        self.assertEqual(refused.returncode, 1, refused.stdout)
        self.assertNotIn("timings", refused.stdout)
        status = self.cli("status", "stranger")
        self.assertEqual(status.returncode, 1, status.stdout)
        self.assertRegex(status.stdout, r"(?m)^gateway\s+down")

    def tokenizer(self, key):
        """A third tokenizer, started on its own with `key` as its client key: (process, port)."""
        port = free_port()
        line = [service("tokenizer"), "--set", f"model.dir={self.pipeline.model}",
                "--set", f"runtime_dir={self.pipeline.run_dir}",
                "--set", f"tokenizer.metrics_port={port}",
                *[a for s in security_settings(self.keys, key) for a in ("--set", s)]]
        log = open(os.path.join(self.pipeline.tmp, f"tokenizer-{key}.log"), "w")
        proc = subprocess.Popen(line, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        return proc, port

    def tokenizers_seen(self):
        status = self.cli("status", "client")
        return int(re.search(r"^tokenizer\s+(\d+)", status.stdout, re.M).group(1))

    def test_a_worker_without_an_allowed_key_gets_no_work_one_with_a_key_joins(self):
        stranger, stranger_port = self.tokenizer("stranger")
        try:
            # Up once its /metrics answers (after its model loaded and it connected).
            self.pipeline.wait_until(
                lambda: scrape(stranger_port, 'seqpipe_stage_requests_total{stage="tokenizer"}')
                is not None, lambda: stop(stranger))
            before = self.refusals()
            with self.client("client") as client:
                for i in range(12):
                    self.assertEqual(client.generate(f"text number {i}", max_new_tokens=4)["status"],
                                     "ok")
            self.assertEqual(
                scrape(stranger_port, 'seqpipe_stage_requests_total{stage="tokenizer"}'), 0)
            self.assertEqual(self.tokenizers_seen(), 2, "the stranger joined the gateway")
            # Refused, it hears nothing from the gateway and reconnects: refused and counted again.
            self.pipeline.wait_until(lambda: self.refusals() > before, lambda: stop(stranger))
        finally:
            stop(stranger)
        allowed, _ = self.tokenizer("worker")
        try:
            self.pipeline.wait_until(lambda: self.tokenizers_seen() == 3, lambda: stop(allowed))
        finally:
            stop(allowed)


class StartChecksTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="seqpipe-security-start-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_hub(self, hub, *settings):
        line = [service(hub), "--set", f"runtime_dir={self.tmp}/run",
                "--set", "gateway.metrics_port=0", "--set", "batcher.metrics_port=0",
                "--set", "gateway.http_endpoint=",
                *[a for s in settings for a in ("--set", s)]]
        return subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    def test_a_hub_beyond_loopback_without_keys_refuses_to_start(self):
        for hub, key in [("gateway", "gateway.client_endpoint"),
                         ("batcher", "batcher.encoder_endpoint")]:
            proc = self.run_hub(hub, f"{key}=tcp://0.0.0.0:{free_port()}")
            _, err = proc.communicate(timeout=30)
            self.assertEqual(proc.returncode, 2, err)
            self.assertIn(f"{key} binds 'tcp://0.0.0.0:", err)
            self.assertIn("beyond loopback in plain text", err)
        # ZeroMQ binds what follows "source;", and a name that merely starts with 127. is no
        # address: both judged as ZeroMQ would bind them.
        for endpoint in [f"tcp://127.0.0.1:1;0.0.0.0:{free_port()}",
                         f"tcp://127.example.com:{free_port()}"]:
            proc = self.run_hub("gateway", f"gateway.client_endpoint={endpoint}")
            _, err = proc.communicate(timeout=30)
            self.assertEqual(proc.returncode, 2, err)
            self.assertIn(f"gateway.client_endpoint binds '{endpoint}' beyond loopback", err)
        # Said explicitly, it starts: its /metrics answers.
        port = free_port()
        proc = self.run_hub("gateway", f"gateway.client_endpoint=tcp://0.0.0.0:{free_port()}",
                            "security.allow_plaintext=true", f"gateway.metrics_port={port}")
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
                    break
                except OSError:
                    self.assertIsNone(proc.poll(), "the gateway exited with allow_plaintext")
                    self.assertLess(time.monotonic(), deadline, "no /metrics in 30 s")
                    time.sleep(0.2)
        finally:
            stop(proc)

    def test_a_secret_key_file_others_may_read_is_refused(self):
        keys = os.path.join(self.tmp, "keys")  # made by keygen
        make_keys(keys)
        self.assertEqual(stat.S_IMODE(os.stat(f"{keys}/hub_secret").st_mode), 0o600)
        settings = [f"gateway.client_endpoint=tcp://0.0.0.0:{free_port()}",
                    *security_settings(keys)]
        os.chmod(f"{keys}/hub_secret", 0o644)
        proc = self.run_hub("gateway", *settings)
        _, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 2, err)
        self.assertIn(f"security.server_key: {keys}/hub_secret: a secret key file must not be "
                      "readable by group or others", err)
        os.chmod(f"{keys}/hub_secret", 0o600)
        os.chmod(f"{keys}/worker_secret", 0o640)
        proc = subprocess.run([service("tokenizer"), "--set", f"runtime_dir={self.tmp}/run",
                               *[a for s in settings for a in ("--set", s)]],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn(f"security.client_key: {keys}/worker_secret", proc.stderr)
        with self.assertRaisesRegex(ValueError, "must not be readable by group or others"):
            Client("tcp://127.0.0.1:1", server_key=f"{keys}/hub", client_key=f"{keys}/worker")


    def test_keygen_writes_0600_from_the_start_and_never_through_a_link(self):
        keys = os.path.join(self.tmp, "keys")
        os.mkdir(keys)
        target = os.path.join(self.tmp, "planted")
        os.symlink(target, f"{keys}/hub_secret")
        proc = subprocess.run([SEQPIPE, "keygen", "--dir", keys, "hub"], capture_output=True,
                              text=True, timeout=30)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertFalse(os.path.exists(target), "keygen wrote through the planted link")
        # With no umask to narrow it, the secret is still created 0600.
        proc = subprocess.run([SEQPIPE, "keygen", "--dir", keys, "other"], capture_output=True,
                              text=True, timeout=30, preexec_fn=lambda: os.umask(0))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(stat.S_IMODE(os.stat(f"{keys}/other_secret").st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(f"{keys}/other").st_mode), 0o644)

    def test_an_allow_list_or_public_key_others_may_write_is_refused(self):
        keys = os.path.join(self.tmp, "keys")
        allowed = make_keys(keys)
        settings = [f"gateway.client_endpoint=tcp://0.0.0.0:{free_port()}",
                    *security_settings(keys)]
        for path, mode, what in [(allowed, 0o777, "allow list directory"),
                                 (f"{allowed}/worker", 0o666, "public key file")]:
            old = stat.S_IMODE(os.stat(path).st_mode)
            os.chmod(path, mode)
            proc = self.run_hub("gateway", *settings)
            _, err = proc.communicate(timeout=30)
            os.chmod(path, old)
            self.assertEqual(proc.returncode, 2, err)
            self.assertIn(f"{path}: {what} must not be writable by group or others", err)

    def test_up_checks_the_key_files_before_it_starts_any_process(self):
        keys = os.path.join(self.tmp, "keys")
        make_keys(keys)
        os.chmod(f"{keys}/hub_secret", 0o644)
        model = os.path.join(self.tmp, "model")
        subprocess.run([MKMODEL, "--preset", "tiny", "--spiece", "--out", model], check=True,
                       capture_output=True, timeout=120)
        settings = [f"model.dir={model}", f"runtime_dir={self.tmp}/run",
                    f"gateway.client_endpoint=tcp://127.0.0.1:{free_port()}",
                    "gateway.http_endpoint=", *security_settings(keys)]
        proc = subprocess.run([SEQPIPE, "up", *[a for s in settings for a in ("--set", s)]],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertIn("security.server_key", proc.stderr)
        self.assertNotIn("processes", proc.stdout, "it started processes first")

if __name__ == "__main__":
    unittest.main()
