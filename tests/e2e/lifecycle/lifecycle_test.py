"""Live model lifecycle under `seqpipe up --repository DIR`: under steady traffic from client
threads, alpha is reloaded from version 1 to 2 and back with `seqpipe models load` (load the new
version, route to it once warm, then unload the old one): no request fails or goes unanswered,
each answer is one of the two versions' own, and after each swap no process of the old version is
left. The KServe repository extension on HTTP lists, unloads and loads; a broken entry (files
missing) and a corrupt one (a config.json that does not parse, so its replicas cannot start) are
reported with their path and reason while alpha keeps serving; a version with a 1 MB config.json
loads through HTTP while alpha's requests keep answering within seconds. KServe v2 over gRPC follows the
versions loaded (the one served answers and says so, the other is NOT_FOUND). With two gateways,
each routes to the new version once a load returns.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL (tests/e2e/harness.py).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (ONE_REPLICA_EACH, SEQPIPE, Pipeline, RepositoryTestCase, free_port,  # noqa: E402
                     kserve_stubs, make_tiny_model, post_json)
from seqpipe_client import Client, SeqpipeError  # noqa: E402

try:
    import grpc
    import grpc_tools  # noqa: F401  (kserve_stubs generates the stubs with it)
except ImportError:  # run on a machine without them: the gRPC test says so rather than fail
    grpc = None

TEXTS = [f"the {w} is here" for w in ("cat", "dog", "house", "tree", "river", "stone")]
# Both of alpha's versions from the start (the default loads each name's newest only).
SETTINGS = [*ONE_REPLICA_EACH, "gateway.default_timeout_ms=30000", "model.repository_versions=0"]


def processes_of(model_dir):
    """The pids of the running processes started for the model version in `model_dir` (the hubs
    and `seqpipe up` are given model.dir=<the repository>, so they do not match)."""
    out = subprocess.run(["pgrep", "-f", f"model.dir={model_dir}( |$)"], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


class Traffic:
    """Client threads sending alpha requests (no version: the highest served) one after another
    until stopped; every request's text index and reply (or error) is kept."""

    def __init__(self, endpoint, threads=2):
        self.stopping = threading.Event()
        self.results = []  # (sent at, text index, reply text or None, error or None)
        self.lock = threading.Lock()
        self.server_s, self.done_at = {}, []
        self.threads = [threading.Thread(target=self.run, args=(endpoint, k)) for k in
                        range(threads)]
        for t in self.threads:
            t.start()

    def run(self, endpoint, k):
        client = Client(endpoint, timeout_ms=30000)
        i = k
        try:
            while not self.stopping.is_set():
                index = i % len(TEXTS)
                sent = time.monotonic()
                try:
                    reply = client.generate(TEXTS[index], max_new_tokens=8, model="alpha")
                    text, error = reply["text"], None
                    self.server_s[len(self.results)] = reply["timings_us"]["total"] / 1e6
                except SeqpipeError as e:
                    text, error = None, f"{e.code}: {e}"
                with self.lock:
                    self.results.append((sent, index, text, error))
                    self.done_at.append(time.monotonic())
                i += 1
        finally:
            client.close()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=60)
        return self.results


class LifecycleTest(RepositoryTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="seqpipe-life-")
        cls.repo = os.path.join(cls.tmp, "models")
        cls.v1, cls.v2 = (os.path.join(cls.repo, "alpha", v) for v in ("1", "2"))
        make_tiny_model(cls.v1, 3)
        make_tiny_model(cls.v2, 11)
        os.makedirs(os.path.join(cls.repo, "broken", "1"))  # no files
        cls.corrupt = os.path.join(cls.repo, "corrupt", "1")
        shutil.copytree(cls.v1, cls.corrupt)
        with open(os.path.join(cls.corrupt, "config.json"), "w") as f:
            f.write("{not json")
        cls.port, cls.grpc_port = free_port(), free_port()
        cls.pipeline = Pipeline("seqpipe-life-up-", [
            *SETTINGS, f"gateway.http_endpoint=127.0.0.1:{cls.port}",
            f"gateway.grpc_endpoint=127.0.0.1:{cls.grpc_port}", "model.name=alpha",
            f"model.repository={cls.repo}"], model_dir=cls.repo, owner=cls)  # not a version's: processes_of
        cls.client = Client(cls.pipeline.endpoint, timeout_ms=30000)

        def both_answer():
            for v in (1, 2):
                cls.client.generate("warm up", max_new_tokens=2, model="alpha", version=v)
            return True
        cls.pipeline.wait_until(both_answer, cls.tearDownClass, timeout=120)
        cls.answers = {v: [cls.client.generate(t, max_new_tokens=8, model="alpha",
                                               version=v)["text"] for t in TEXTS]
                       for v in (1, 2)}

    def load(self, version):
        out = self.models("load", "alpha", "--version", str(version))
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        return out

    def test_the_two_versions_differ(self):
        self.assertNotEqual(self.answers[1], self.answers[2])

    def test_reload_under_traffic_drops_nothing(self):
        self.load(1)  # alpha/1 alone
        self.assertEqual(processes_of(self.v2), [])
        self.assertEqual(self.state()[("alpha", "2")][0], "UNAVAILABLE")
        traffic = Traffic(self.pipeline.endpoint)
        try:
            time.sleep(1.0)
            self.load(2)
            swapped_to_2 = time.monotonic()
            self.assertEqual(processes_of(self.v1), [], "alpha/1 left running after its unload")
            self.assertGreater(len(processes_of(self.v2)), 0)
            time.sleep(1.0)
            swapping_back = time.monotonic()
            self.load(1)
            swapped_to_1 = time.monotonic()
            self.assertEqual(processes_of(self.v2), [], "alpha/2 left running after its unload")
            time.sleep(1.0)
        finally:
            results = traffic.stop()
        errors = [r for r in results if r[3] is not None]
        self.assertEqual(errors, [], f"{len(errors)} of {len(results)} requests failed")
        self.assertGreater(len(results), 10)
        for n, (sent, index, text, _) in enumerate(results):
            why = (n, sent - swapped_to_2, sent - swapped_to_1, traffic.done_at[n] - sent,
                   traffic.server_s.get(n))
            self.assertIn(text, (self.answers[1][index], self.answers[2][index]))
            # Sent after a swap returned, before the next began: only the new version answers. (A
            # swap routes to the new version before it returns: it returns once the old one is
            # stopped.)
            if sent > swapped_to_1:
                self.assertEqual(text, self.answers[1][index], why)
            elif swapped_to_2 < sent < swapping_back:
                self.assertEqual(text, self.answers[2][index], why)
        served_by = {2 if text == self.answers[2][i] else 1 for _, i, text, _ in results}
        self.assertEqual(served_by, {1, 2})
        rows = self.state()
        self.assertEqual(rows[("alpha", "1")][0], "READY")
        self.assertEqual(rows[("alpha", "2")], ("UNAVAILABLE", "unloaded"))

    @unittest.skipIf(grpc is None, "python3-grpcio and python3-grpc-tools are not installed")
    def test_grpc_follows_the_versions_loaded(self):
        with tempfile.TemporaryDirectory() as generated:
            pb, pb_grpc = kserve_stubs(generated)
            with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as channel:
                stub = pb_grpc.GRPCInferenceServiceStub(channel)
                try:
                    for version in (1, 2):
                        self.load(version)  # and the other one unloaded
                        self.grpc_serves_only(pb, stub, version)
                finally:
                    self.load(1)

    def grpc_serves_only(self, pb, stub, version):
        """alpha's `version` answers gRPC's calls, and the other one is NOT_FOUND."""
        tensor = pb.ModelInferRequest.InferInputTensor(
            name="text", datatype="BYTES", shape=[1],
            contents=pb.InferTensorContents(bytes_contents=[TEXTS[2].encode()]))
        request = pb.ModelInferRequest(model_name="alpha", inputs=[tensor])
        request.parameters["max_new_tokens"].int64_param = 8
        response = stub.ModelInfer(request, timeout=30)
        self.assertEqual(response.model_version, str(version))
        self.assertEqual(response.outputs[0].contents.bytes_contents[0].decode(),
                         self.answers[version][2])
        metadata = stub.ModelMetadata(pb.ModelMetadataRequest(name="alpha"), timeout=10)
        self.assertEqual(list(metadata.versions), [str(version)])
        self.assertTrue(stub.ModelReady(pb.ModelReadyRequest(name="alpha", version=str(version)),
                                        timeout=10).ready)
        other = str(3 - version)
        request.model_version = other
        for call in (lambda: stub.ModelInfer(request, timeout=30),
                     lambda: stub.ModelReady(pb.ModelReadyRequest(name="alpha", version=other),
                                             timeout=10)):
            with self.assertRaises(grpc.RpcError) as caught:
                call()
            self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn(f"model 'alpha' version {other} is not served here",
                          caught.exception.details())

    def test_a_large_config_loads_while_alpha_keeps_answering(self):
        # A version whose config.json is 1 MB (T5's fields and a junk array, just under the
        # engine's cap): the supervisor loads its settings, the gateway's loop reads no file (it
        # once stalled every model's requests for seconds parsing it).
        big = os.path.join(self.repo, "big", "1")
        shutil.copytree(self.v1, big)
        with open(os.path.join(big, "config.json")) as f:
            config = json.load(f)
        config["junk"] = list(range(140000))
        with open(os.path.join(big, "config.json"), "w") as f:
            json.dump(config, f)
        self.assertGreater(os.path.getsize(os.path.join(big, "config.json")), 1000000)
        traffic = Traffic(self.pipeline.endpoint)
        try:
            time.sleep(0.5)
            status, body = post_json(self.port, "/v2/repository/models/big/load", {},
                                     timeout=240)
            self.assertEqual(status, 200, body)
            self.assertEqual(self.client.generate(TEXTS[0], max_new_tokens=8, model="big")["text"],
                             self.answers[1][0])
            time.sleep(0.5)
        finally:
            results = traffic.stop()
            post_json(self.port, "/v2/repository/models/big/unload", {}, timeout=240)
        errors = [r for r in results if r[3] is not None]
        self.assertEqual(errors, [], f"{len(errors)} of {len(results)} requests failed")
        self.assertGreater(len(results), 10)
        # Generous for a loaded machine: a stalled loop held them for seconds.
        slowest = max(done - sent for (sent, *_), done in zip(results, traffic.done_at))
        print(f"a 1 MB config.json loaded: {len(results)} alpha requests, slowest {slowest:.3f} s",
              flush=True)
        self.assertLess(slowest, 5.0)

    def test_repository_api_on_http(self):
        status, index = post_json(self.port, "/v2/repository/index", {})
        self.assertEqual(status, 200, index)
        by_name = {(m["name"], m["version"]): m for m in index}
        self.assertIn(("alpha", "1"), by_name)
        self.assertIn(os.path.join(self.repo, "broken", "1"), by_name[("broken", "")]["reason"])
        self.assertEqual(post_json(self.port, "/v2/repository/models/alpha/load",
                                   {"parameters": {"version": "1"}})[0], 200)
        self.assertEqual(self.client.generate(TEXTS[0], max_new_tokens=8, model="alpha")["text"],
                         self.answers[1][0])
        self.assertEqual(post_json(self.port, "/v2/repository/models/alpha/unload", {})[0], 200)
        self.assertEqual(processes_of(self.v1) + processes_of(self.v2), [])
        with self.assertRaises(SeqpipeError) as caught:
            self.client.generate(TEXTS[0], max_new_tokens=8, model="alpha")
        self.assertEqual(caught.exception.code, "not_found")
        status, body = post_json(self.port, "/v2/repository/models/alpha/load",
                                 {"parameters": {"version": 1}})
        self.assertEqual(status, 200, body)
        self.assertEqual(self.client.generate(TEXTS[0], max_new_tokens=8, model="alpha")["text"],
                         self.answers[1][0])
        status, body = post_json(self.port, "/v2/repository/models/gamma/load", {})
        self.assertEqual(status, 404, body)
        self.assertIn("gamma", body["error"])

    def test_broken_entries_are_reported_and_alpha_keeps_serving(self):
        out = self.models("load", "broken")
        self.assertEqual(out.returncode, 1)
        self.assertIn(os.path.join(self.repo, "broken", "1"), out.stderr)
        # The corrupt model's replicas could not start: given up, its group stopped.
        deadline = time.monotonic() + 90
        while self.state().get(("corrupt", "1"), ("",))[0] != "UNAVAILABLE":
            self.assertLess(time.monotonic(), deadline, self.state())
            time.sleep(0.5)
        state, reason = self.state()[("corrupt", "1")]
        self.assertIn("exited with status 2 (bad usage or config)", reason)  # not restarted
        # What the replica said on its way out: the file at fault.
        self.assertIn(f"does not load: {self.corrupt}/config.json: not valid JSON", reason)
        self.assertEqual(processes_of(self.corrupt), [])
        self.assertTrue(self.pipeline.alive())
        reply = self.client.generate(TEXTS[1], max_new_tokens=8, model="alpha", version=1)
        self.assertEqual(reply["text"], self.answers[1][1])


class TwoGatewaysTest(unittest.TestCase):
    """With gateway.replicas=2 every gateway learns each swap: the second one routes to the new
    version as soon as the load returns."""

    def test_each_gateway_routes_to_the_loaded_version(self):
        tmp = tempfile.mkdtemp(prefix="seqpipe-life2-")
        repo = os.path.join(tmp, "models")
        make_tiny_model(os.path.join(repo, "alpha", "1"), 3)
        make_tiny_model(os.path.join(repo, "alpha", "2"), 11)
        pipeline = Pipeline("seqpipe-life2-up-", [*SETTINGS, "gateway.replicas=2",
                                                  "model.name=alpha",
                                                  f"model.repository={repo}"], model_dir=repo)
        clients = [Client(pipeline.endpoint, timeout_ms=30000),
                   Client(pipeline.endpoint.replace("gateway.sock", "gateway-2.sock"),
                          timeout_ms=30000)]
        try:
            def both_answer():
                for c in clients:
                    for v in (1, 2):
                        c.generate("warm up", max_new_tokens=2, model="alpha", version=v)
                return True
            pipeline.wait_until(both_answer, lambda: None, timeout=120)
            answers = {v: clients[0].generate(TEXTS[0], max_new_tokens=8, model="alpha",
                                              version=v)["text"] for v in (1, 2)}
            self.assertNotEqual(answers[1], answers[2])
            for version in (1, 2, 1):
                out = subprocess.run([SEQPIPE, "models", "load", "alpha", "--version",
                                      str(version), "--set", f"runtime_dir={pipeline.run_dir}"],
                                     capture_output=True, text=True, timeout=240)
                self.assertEqual(out.returncode, 0, out.stderr)
                for k, c in enumerate(clients):
                    reply = c.generate(TEXTS[0], max_new_tokens=8, model="alpha")
                    self.assertEqual(reply["text"], answers[version], f"gateway {k + 1}")
                    with self.assertRaises(SeqpipeError) as caught:
                        c.generate(TEXTS[0], max_new_tokens=8, model="alpha",
                                   version=3 - version)
                    self.assertEqual(caught.exception.code, "not_found")
        finally:
            for c in clients:
                c.close()
            pipeline.close()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
