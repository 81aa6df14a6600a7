"""A model repository served by one pipeline (`seqpipe up --repository DIR`): two different tiny
models (seqpipe-mkmodel, different seeds; one in <name>/1/, one in today's flat layout) each answer
exactly as a pipeline serving that model alone does, under mixed traffic on one connection; a
request naming an unknown model or version is answered not_found at once while the others keep
serving; a broken entry is left out with its path and reason; HTTP routes by model too
(/v1/generate `model`, KServe /v2/models/<name>[/versions/<v>]/infer), each model has its
readiness (/v2/models/<name>/ready), OpenAI's /v1/models lists both, KServe v2 over gRPC routes
by model_name and model_version (grpcio's client, as tests/e2e/grpc), each version's requests get
its own seqpipe.yaml's settings (alpha's lower token cap), `seqpipe status` shows each
version's replicas, `seqpipe send --model/--version` runs a named one, and the gateway's and
batcher's metrics carry each version's labels.

Environment: SEQPIPE_BIN (seqpipe), SEQPIPE_MKMODEL (tests/e2e/harness.py).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (ONE_REPLICA_EACH, SEQPIPE, Pipeline, RepositoryTestCase, answers,  # noqa: E402
                     free_port, kserve_stubs, make_tiny_model, post_json)
from seqpipe_client import Client, SeqpipeError  # noqa: E402

try:
    import grpc
    import grpc_tools  # noqa: F401  (kserve_stubs generates the stubs with it)
except ImportError:  # run on a machine without them: the gRPC test says so rather than fail
    grpc = None

TEXTS = [f"the {w} is here {i}" for i, w in enumerate(
    ["cat", "dog", "house", "speling", "tree", "car", "river", "stone", "word", "light", "sun",
     "moon"])]
SETTINGS = [*ONE_REPLICA_EACH, "gateway.default_timeout_ms=20000"]


def outputs_alone(model_dir):
    """Each text's greedy output from a pipeline serving `model_dir` alone."""
    pipeline = Pipeline("seqpipe-repo-alone-", SETTINGS, model_dir=model_dir)
    client = Client(pipeline.endpoint, timeout_ms=20000)
    try:
        pipeline.wait_until(lambda: answers(client), pipeline.close)
        return [client.generate(t, max_new_tokens=8)["text"] for t in TEXTS]
    finally:
        client.close()
        pipeline.close()


class RepositoryTest(RepositoryTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="seqpipe-repo-")
        cls.repo = os.path.join(cls.tmp, "models")
        cls.alpha = os.path.join(cls.repo, "alpha", "1")
        cls.beta = os.path.join(cls.repo, "beta")  # the flat layout: version 1
        make_tiny_model(cls.alpha, 3)
        # alpha's own setting, which beta does not share: a lower token cap. (Not a key that
        # refuses streams: the gRPC test streams both models.)
        with open(os.path.join(cls.alpha, "seqpipe.yaml"), "w") as f:
            f.write("decoder:\n  max_new_tokens: 40\n")
        make_tiny_model(cls.beta, 11)
        os.makedirs(os.path.join(cls.repo, "broken", "1"))  # no files: left out, not fatal
        cls.alone = {"alpha": outputs_alone(cls.alpha), "beta": outputs_alone(cls.beta)}
        cls.port, cls.grpc_port = free_port(), free_port()
        cls.pipeline = Pipeline("seqpipe-repo-both-", [
            *SETTINGS, f"gateway.http_endpoint=127.0.0.1:{cls.port}",
            f"gateway.grpc_endpoint=127.0.0.1:{cls.grpc_port}", "model.name=alpha",
            f"model.repository={cls.repo}"], model_dir=cls.alpha, owner=cls)
        cls.client = Client(cls.pipeline.endpoint, timeout_ms=20000)

        def both_answer():
            for name in ("alpha", "beta"):
                cls.client.generate("warm up", max_new_tokens=2, model=name)
            return True
        cls.pipeline.wait_until(both_answer, cls.tearDownClass, timeout=90)

    def test_the_two_models_differ(self):
        # Otherwise answering "as alone" would not tell the models apart.
        self.assertNotEqual(self.alone["alpha"], self.alone["beta"])

    def test_each_model_answers_as_alone_under_mixed_traffic(self):
        for _ in range(3):
            pending = []
            for i, text in enumerate(TEXTS):  # interleaved on one connection, all in flight
                for name in ("alpha", "beta"):
                    pending.append((name, i, self.client.submit(text, max_new_tokens=8,
                                                                model=name)))
                pending.append(("alpha", i, self.client.submit(text, max_new_tokens=8)))  # default
            for name, i, request_id in pending:
                reply = self.client.result(request_id, 30000)
                self.assertEqual(reply.get("status"), "ok", reply)
                self.assertEqual(reply["text"], self.alone[name][i], f"{name}: {TEXTS[i]!r}")

    def test_a_named_version_runs_it(self):
        reply = self.client.generate(TEXTS[0], max_new_tokens=8, model="beta", version=1)
        self.assertEqual(reply["text"], self.alone["beta"][0])

    def test_unknown_model_or_version_is_not_found_and_the_others_keep_serving(self):
        for kwargs in ({"model": "gamma"}, {"model": "alpha", "version": 2}, {"model": "broken"}):
            with self.assertRaises(SeqpipeError) as caught:
                self.client.generate(TEXTS[1], max_new_tokens=8, **kwargs)
            self.assertEqual(caught.exception.code, "not_found", kwargs)
            self.assertIn("alpha/1", str(caught.exception))  # names what is served
        self.assertEqual(self.client.generate(TEXTS[1], max_new_tokens=8, model="beta")["text"],
                         self.alone["beta"][1])
        self.assertEqual(self.client.generate(TEXTS[1], max_new_tokens=8)["text"],
                         self.alone["alpha"][1])

    def test_each_model_version_gets_its_own_settings(self):
        # The gateway's own model.dir is alpha's; beta's requests get beta's settings all the same.
        with self.assertRaises(SeqpipeError) as caught:
            self.client.generate(TEXTS[2], max_new_tokens=50, model="alpha")
        self.assertEqual(caught.exception.code, "invalid_argument")
        self.assertIn("[1, 40]", caught.exception.message)
        self.assertEqual(self.client.generate(TEXTS[2], max_new_tokens=50, model="beta")["status"],
                         "ok")

    def test_http_routes_by_model(self):
        params = {"max_new_tokens": 8}
        status, body = post_json(self.port, "/v1/generate",
                                 {"text": TEXTS[2], "model": "beta", "params": params})
        self.assertEqual((status, body["text"]), (200, self.alone["beta"][2]))
        infer = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                             "data": [TEXTS[3]]}], "parameters": params}
        status, body = post_json(self.port, "/v2/models/beta/versions/1/infer", infer)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["model_name"], "beta")
        self.assertEqual(body["outputs"][0]["data"], [self.alone["beta"][3]])
        status, body = post_json(self.port, "/v2/models/alpha/infer", infer)
        self.assertEqual(body["outputs"][0]["data"], [self.alone["alpha"][3]])
        status, body = post_json(self.port, "/v2/models/gamma/infer", infer)
        self.assertEqual(status, 404, body)
        self.assertIn("not_found", body["error"])

    def test_openai_lists_every_model(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/models", timeout=10) as r:
            self.assertEqual([m["id"] for m in json.loads(r.read())["data"]], ["alpha", "beta"])
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/models/beta",
                                    timeout=10) as r:
            self.assertEqual(json.loads(r.read())["id"], "beta")
        status, body = post_json(self.port, "/v1/completions",
                                 {"model": "beta", "prompt": TEXTS[4], "max_tokens": 8})
        self.assertEqual(status, 200, body)
        self.assertEqual((body["model"], body["choices"][0]["text"]),
                         ("beta", self.alone["beta"][4]))

    @unittest.skipIf(grpc is None, "python3-grpcio and python3-grpc-tools are not installed")
    def test_grpc_routes_by_model(self):
        with tempfile.TemporaryDirectory() as generated:
            pb, pb_grpc = kserve_stubs(generated)
            with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as channel:
                self.grpc_calls(pb, pb_grpc.GRPCInferenceServiceStub(channel))

    def grpc_calls(self, pb, stub):
        def request(name, text, version="", request_id=""):
            tensor = pb.ModelInferRequest.InferInputTensor(
                name="text", datatype="BYTES", shape=[1],
                contents=pb.InferTensorContents(bytes_contents=[text.encode()]))
            r = pb.ModelInferRequest(model_name=name, model_version=version, id=request_id,
                                     inputs=[tensor])
            r.parameters["max_new_tokens"].int64_param = 8
            return r
        for name, version in (("alpha", ""), ("beta", ""), ("beta", "1")):
            response = stub.ModelInfer(request(name, TEXTS[5], version), timeout=30)
            self.assertEqual((response.model_name, response.model_version), (name, "1"))
            self.assertEqual(response.outputs[0].contents.bytes_contents[0].decode(),
                             self.alone[name][5])
        for name, version in (("gamma", ""), ("beta", "2"), ("broken", "")):
            with self.assertRaises(grpc.RpcError) as caught:
                stub.ModelInfer(request(name, TEXTS[5], version), timeout=30)
            self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn("not_found: ", caught.exception.details())
            self.assertIn("alpha/1, beta/1", caught.exception.details())  # the catalog's message
        # Both models on one stream, each request answered by its own.
        got = {}
        for r in stub.ModelStreamInfer(iter([request("alpha", TEXTS[6], request_id="a"),
                                             request("beta", TEXTS[6], request_id="b")]),
                                       timeout=60):
            self.assertEqual(r.error_message, "")
            got.setdefault(r.infer_response.id, []).append(r.infer_response)
        for request_id, name in (("a", "alpha"), ("b", "beta")):
            self.assertEqual({x.model_name for x in got[request_id]}, {name})
            self.assertEqual("".join(x.outputs[0].contents.bytes_contents[0].decode()
                                     for x in got[request_id]), self.alone[name][6])
        # Readiness and metadata per model.
        for name in ("alpha", "beta"):
            self.assertTrue(stub.ModelReady(pb.ModelReadyRequest(name=name), timeout=10).ready)
            metadata = stub.ModelMetadata(pb.ModelMetadataRequest(name=name), timeout=10)
            self.assertEqual((metadata.name, list(metadata.versions)), (name, ["1"]))
        with self.assertRaises(grpc.RpcError) as caught:
            stub.ModelReady(pb.ModelReadyRequest(name="gamma"), timeout=10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_readiness_and_metadata_per_model(self):
        def get(path):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                            timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())
        for path in ("/v2/health/ready", "/v2/models/alpha/ready", "/v2/models/beta/ready",
                     "/v2/models/beta/versions/1/ready"):
            self.assertEqual(get(path)[0], 200, path)
        self.assertEqual(get("/v2/models/gamma/ready")[0], 404)
        self.assertEqual(get("/v2/models/beta/versions/2/ready")[0], 404)
        self.assertEqual(get("/v2/models/beta")[1]["name"], "beta")

    def test_send_names_the_model_and_version(self):
        def send(*args):
            return subprocess.run([SEQPIPE, "send", "--endpoint", self.pipeline.endpoint,
                                   "--max-new-tokens", "8", *args], capture_output=True,
                                  text=True, timeout=60)
        out = send("--model", "beta", "--version", "1", TEXTS[2])
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.splitlines()[0], self.alone["beta"][2])
        out = send("--model", "gamma", TEXTS[2])
        self.assertEqual(out.returncode, 1)
        self.assertIn("not_found", out.stderr)

    def test_the_hubs_label_their_latencies_with_the_model_version(self):
        for name in ("alpha", "beta"):
            self.client.generate(TEXTS[3], max_new_tokens=8, model=name)
        for stage, series in (("gateway", "seqpipe_gateway_request_seconds_count"),
                              ("batcher", "seqpipe_stage_batch_size_count")):
            port, = self.pipeline.metrics_ports(stage, 1)
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            for name in ("alpha", "beta"):
                counts = [float(line.split()[-1]) for line in body.splitlines()
                          if line.startswith(series + "{") and f'model="{name}"' in line
                          and 'version="1"' in line and 'status="error"' not in line]
                self.assertEqual(len(counts), 1, f"{stage} {name}: {body}")
                self.assertGreaterEqual(counts[0], 1, f"{stage} {name}")

    def test_status_shows_each_versions_replicas(self):
        out = subprocess.run([SEQPIPE, "status", "--set", f"runtime_dir={self.pipeline.run_dir}"],
                             capture_output=True, text=True, timeout=30).stdout
        rows = {" ".join(line.split()[:2]): line.split() for line in out.splitlines()}
        for stage in ("tokenizer", "encoder", "decoder", "postprocessor"):
            for model in ("alpha/1", "beta/1"):
                self.assertEqual(rows[f"{stage} {model}"][2], "1", out)  # one live replica

    def test_each_replicas_metrics_name_its_model_version(self):
        bodies = [urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
                  .decode() for port in self.pipeline.metrics_ports("encoder", 2)]
        labels = sorted('model="alpha"' in b and 'version="1"' in b for b in bodies)
        self.assertEqual(labels, [False, True])
        self.assertEqual(sorted('model="beta"' in b for b in bodies), [False, True])

    def test_repository_option_sets_the_key(self):
        out = subprocess.run([SEQPIPE, "up", "--repository", self.repo, "--print-config"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        self.assertIn(f'repository: "{self.repo}"', out)

    def test_the_broken_entry_is_reported_with_its_path_and_reason(self):
        with open(self.pipeline.log.name) as log:
            text = log.read()
        self.assertIn(os.path.join(self.repo, "broken", "1"), text)
        self.assertIn("missing config.json", text)


if __name__ == "__main__":
    unittest.main()
