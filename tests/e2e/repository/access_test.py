"""Who may call the model repository API (POST /v2/repository/...) of a real pipeline (`seqpipe up
--repository DIR`, tiny model): with HTTP beyond loopback it is off unless
gateway.repository_api_public says otherwise (403 naming the key), and with
gateway.repository_token_file every call carries the bearer token (401 without it or with
another); a symbolic link out of the repository is refused and the index says nothing of where
it points.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL (tests/e2e/harness.py).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (ONE_REPLICA_EACH, SEQPIPE, Pipeline, RepositoryTestCase, answers,  # noqa: E402
                     free_port, make_tiny_model)
from seqpipe_client import Client  # noqa: E402

TOKEN = "e2e-token-0123456789abcdef"


def repository_call(port, path, token=None):
    """(status, parsed JSON body) of a POST to the repository API."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"{}", method="POST",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class AccessTestCase(RepositoryTestCase):
    """A repository (alpha/1, and a link out of it) served with HTTP on every interface."""
    EXTRA = ()

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="seqpipe-repo-access-")
        cls.repo = os.path.join(cls.tmp, "models")
        cls.outside = os.path.join(cls.tmp, "outside-the-repository")
        make_tiny_model(os.path.join(cls.repo, "alpha", "1"), 3)
        os.makedirs(os.path.join(cls.outside, "1"))
        os.symlink(cls.outside, os.path.join(cls.repo, "stolen"))
        cls.token_file = os.path.join(cls.tmp, "token")
        with open(cls.token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.port = free_port()
        cls.pipeline = Pipeline("seqpipe-repo-access-", [
            *ONE_REPLICA_EACH, f"gateway.http_endpoint=0.0.0.0:{cls.port}",
            "security.allow_plaintext=true", "model.name=alpha", f"model.repository={cls.repo}",
            *[s.format(token_file=cls.token_file) for s in cls.EXTRA]],
            model_dir=os.path.join(cls.repo, "alpha", "1"), owner=cls)
        cls.client = Client(cls.pipeline.endpoint, timeout_ms=20000)
        cls.pipeline.wait_until(lambda: answers(cls.client), cls.tearDownClass, timeout=90)
        # Answering comes before the supervisor's next look at the hubs marks the version READY.
        cls.pipeline.wait_until(lambda: " READY" in subprocess.run(
            [SEQPIPE, "models", "list", "--set", f"runtime_dir={cls.pipeline.run_dir}"],
            capture_output=True, text=True, timeout=60).stdout, cls.tearDownClass, timeout=90)


class OffBeyondLoopbackTest(AccessTestCase):
    def test_repository_calls_are_refused_naming_the_key(self):
        for path in ("/v2/repository/index", "/v2/repository/models/alpha/unload"):
            status, body = repository_call(self.port, path)
            self.assertEqual(status, 403, body)
            self.assertIn("gateway.repository_api_public", body["error"])
        self.assertEqual(self.state()[("alpha", "1")][0], "READY")  # nothing was unloaded
        self.assertEqual(self.client.generate("still served", max_new_tokens=2)["status"], "ok")


class PublicWithATokenTest(AccessTestCase):
    EXTRA = ("gateway.repository_api_public=true", "gateway.repository_token_file={token_file}")

    def test_calls_need_the_bearer_token(self):
        for token in (None, "wrong-token-0123456789abcdef", TOKEN[:-1]):
            status, body = repository_call(self.port, "/v2/repository/index", token)
            self.assertEqual(status, 401, body)
            self.assertIn("gateway.repository_token_file", body["error"])
        status, index = repository_call(self.port, "/v2/repository/index", TOKEN)
        self.assertEqual(status, 200, index)
        states = {(e["name"], e["version"]): e for e in index}
        self.assertEqual(states[("alpha", "1")]["state"], "READY")
        # The link out of the repository: refused, and nothing of its target shown.
        stolen = [e for e in index if e["name"] == "stolen"]
        self.assertEqual(len(stolen), 1, index)
        self.assertIn("refused: a symbolic link out of the repository", stolen[0]["reason"])
        self.assertNotIn(self.outside, json.dumps(index))
        status, body = repository_call(self.port, "/v2/repository/models/stolen/load", TOKEN)
        self.assertEqual(status, 404, body)
        self.assertNotIn(self.outside, json.dumps(body))


if __name__ == "__main__":
    unittest.main(verbosity=2)
