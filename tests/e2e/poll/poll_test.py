"""Poll mode under `seqpipe up --repository DIR` (model.repository_poll_ms, as Triton's
--model-control-mode=poll): under steady traffic from client threads, copying alpha's version 2
into the repository reloads alpha to it (routed to once warm, version 1's processes gone after)
and removing it reloads back to version 1 (version 2's processes gone): no request fails or goes
unanswered. A model whose config.json does not parse is reported with its path and reason in the
log and the repository index, is not tried again while its files stay the same, and is loaded
once they are fixed, then unloaded when removed; alpha keeps serving throughout. A version whose
weights file stalled half-copied is listed as incomplete and not loaded (the name's served
version untouched) until the copy completes.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL (tests/e2e/harness.py).
"""
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "lifecycle"))
from harness import ONE_REPLICA_EACH, Pipeline, RepositoryTestCase, make_tiny_model  # noqa: E402
from lifecycle_test import TEXTS, Traffic, processes_of  # noqa: E402
from seqpipe_client import Client  # noqa: E402

POLL_MS = 200


class PollTest(RepositoryTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="seqpipe-poll-")
        cls.repo = os.path.join(cls.tmp, "models")
        cls.staged = os.path.join(cls.tmp, "staged")  # made here, copied in by the tests
        cls.v1, cls.v2 = (os.path.join(cls.repo, "alpha", v) for v in ("1", "2"))
        make_tiny_model(cls.v1, 3)
        make_tiny_model(os.path.join(cls.staged, "alpha2"), 11)
        make_tiny_model(os.path.join(cls.staged, "beta"), 5)
        cls.pipeline = Pipeline("seqpipe-poll-up-", [
            *ONE_REPLICA_EACH, "gateway.default_timeout_ms=30000", "model.name=alpha",
            f"model.repository={cls.repo}", f"model.repository_poll_ms={POLL_MS}"],
            model_dir=cls.repo, owner=cls)  # not a version's: processes_of
        cls.client = Client(cls.pipeline.endpoint, timeout_ms=30000)
        cls.pipeline.wait_until(lambda: cls.alpha(TEXTS[0]), cls.tearDownClass, timeout=120)
        cls.answers_v1 = [cls.alpha(t) for t in TEXTS]

    @classmethod
    def alpha(cls, text, **kw):
        return cls.client.generate(text, max_new_tokens=8, model="alpha", **kw)["text"]

    def wait_for(self, what, condition, timeout=120):
        deadline = time.monotonic() + timeout
        while not condition():
            self.assertTrue(self.pipeline.alive(), f"seqpipe up exited; see {self.pipeline.log.name}")
            self.assertLess(time.monotonic(), deadline,
                            f"{what}: not within {timeout} s; {self.state()}")
            time.sleep(0.2)

    def log(self):
        with open(self.pipeline.log.name) as f:
            return f.read()

    def test_a_version_copied_in_and_removed_reloads_without_errors(self):
        traffic = Traffic(self.pipeline.endpoint)
        try:
            time.sleep(1.0)
            shutil.copytree(os.path.join(self.staged, "alpha2"), self.v2)
            self.wait_for("alpha/2 ready, alpha/1 unloaded", lambda: (
                self.state().get(("alpha", "2"), ("",))[0] == "READY"
                and self.state()[("alpha", "1")][0] == "UNAVAILABLE"))
            self.assertEqual(processes_of(self.v1), [], "alpha/1 left running after the reload")
            self.assertGreater(len(processes_of(self.v2)), 0)
            answers_v2 = [self.alpha(t, version=2) for t in TEXTS]
            self.assertNotEqual(answers_v2, self.answers_v1)
            self.assertEqual([self.alpha(t) for t in TEXTS], answers_v2)  # routed to version 2
            time.sleep(1.0)
            shutil.rmtree(self.v2)
            self.wait_for("alpha/2 unloaded, alpha/1 ready", lambda: (
                self.state()[("alpha", "2")][0] == "UNAVAILABLE"
                and self.state()[("alpha", "1")][0] == "READY"))
            self.wait_for("alpha/2's processes gone", lambda: processes_of(self.v2) == [], 30)
            time.sleep(1.0)
        finally:
            results = traffic.stop()
        errors = [r for r in results if r[3] is not None]
        self.assertEqual(errors, [], f"{len(errors)} of {len(results)} requests failed")
        self.assertGreater(len(results), 10)
        for _, index, text, _ in results:
            self.assertIn(text, (self.answers_v1[index], answers_v2[index]))
        served_by = {2 if text == answers_v2[i] else 1 for _, i, text, _ in results}
        self.assertEqual(served_by, {1, 2})
        self.assertEqual([self.alpha(t) for t in TEXTS], self.answers_v1)
        self.assertIn(f"repository poll: loading alpha/2 from {self.v2}", self.log())

    def test_a_broken_model_is_reported_and_retried_only_when_its_files_change(self):
        beta = os.path.join(self.repo, "beta", "1")
        os.makedirs(os.path.dirname(beta))
        shutil.copytree(os.path.join(self.staged, "beta"), beta + ".tmp")
        with open(os.path.join(beta + ".tmp", "config.json"), "w") as f:
            f.write("{not json")
        os.rename(beta + ".tmp", beta)  # not a version directory until renamed (".tmp")
        self.wait_for("beta/1 failed", lambda: (
            self.state().get(("beta", "1"), ("",))[0] == "UNAVAILABLE"
            and "exited" in self.state()[("beta", "1")][1]))
        self.assertIn(beta, self.state()[("beta", "1")][1])
        self.assertIn(f"model beta/1 is not served: {beta}: ", self.log())
        self.assertEqual(processes_of(beta), [])
        time.sleep(10 * POLL_MS / 1000)  # ten more scans: not tried again
        self.assertEqual(self.log().count("repository poll: loading beta/1"), 1)
        self.assertEqual(processes_of(beta), [])
        self.assertEqual(self.alpha(TEXTS[1]), self.answers_v1[1])  # alpha kept serving
        shutil.copy(os.path.join(self.staged, "beta", "config.json"), beta)  # fixed
        self.wait_for("beta/1 ready", lambda: self.state()[("beta", "1")][0] == "READY")
        self.assertEqual(self.log().count("repository poll: loading beta/1"), 2)
        reply = self.client.generate(TEXTS[2], max_new_tokens=8, model="beta")
        self.assertTrue(reply["text"])
        self.assertGreater(len(processes_of(beta)), 0)
        shutil.rmtree(os.path.dirname(beta))  # a removed model: unloaded, its processes gone
        self.wait_for("beta/1 unloaded", lambda: self.state()[("beta", "1")][0] == "UNAVAILABLE")
        self.assertEqual(processes_of(beta), [])

    def test_a_half_copied_version_is_not_loaded_until_whole(self):
        delta = os.path.join(self.repo, "delta")
        shutil.copytree(os.path.join(self.staged, "beta"), os.path.join(delta, "1"))
        self.wait_for("delta/1 ready", lambda: self.state().get(("delta", "1"), ("",))[0] == "READY")
        v2 = os.path.join(delta, "2")
        half = os.path.join(self.tmp, "delta2-half")
        shutil.copytree(os.path.join(self.staged, "alpha2"), half)
        with open(os.path.join(half, "model.safetensors"), "rb") as f:
            whole = f.read()
        with open(os.path.join(half, "model.safetensors"), "wb") as f:
            f.write(whole[:len(whole) // 2])
        os.rename(half, v2)  # a copy stalled half-way: the same files for many scans
        weights = os.path.join(v2, "model.safetensors")
        self.wait_for("delta/2 reported", lambda: f"{v2}: model.safetensors is incomplete" in self.log())
        time.sleep(10 * POLL_MS / 1000)
        self.assertNotIn("repository poll: loading delta/2", self.log())
        self.assertEqual(processes_of(v2), [])
        self.assertEqual(self.state()[("delta", "1")][0], "READY")
        reply = self.client.generate(TEXTS[2], max_new_tokens=8, model="delta")
        self.assertTrue(reply["text"])
        with open(weights, "wb") as f:  # the copy completes
            f.write(whole)
        self.wait_for("delta/2 ready, delta/1 unloaded", lambda: (
            self.state().get(("delta", "2"), ("",))[0] == "READY"
            and self.state()[("delta", "1")][0] == "UNAVAILABLE"))
        self.assertEqual(self.log().count("repository poll: loading delta/2"), 1)
        shutil.rmtree(delta)
        self.wait_for("delta unloaded", lambda: self.state()[("delta", "2")][0] == "UNAVAILABLE")
        self.wait_for("delta's processes gone", lambda: processes_of(delta) == [], 30)

    def test_an_entry_missing_files_is_logged_once(self):
        gamma = os.path.join(self.repo, "gamma", "1")
        os.makedirs(gamma)
        time.sleep(10 * POLL_MS / 1000)
        self.assertEqual(self.log().count(f"repository poll: {gamma}: "), 1, self.log())
        self.assertIn(gamma, self.state()[("gamma", "-")][1])
        shutil.rmtree(os.path.dirname(gamma))


if __name__ == "__main__":
    unittest.main()
