"""HTTP on the gateway against a real pipeline (`seqpipe up`, tiny model): POST /v1/generate and the
KServe v2 endpoints, as curl would send them (urllib); every error code's HTTP status; the JSON
reply equals the msgpack path's; bad bodies answered and the gateway kept serving.

Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py), PYTHONPATH with clients/python.
"""
import json
import os
import sys
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import PipelineTestCase, free_port  # noqa: E402


def http(port, method, path, body=None, raw=None):
    """(status, parsed JSON body) of one request to 127.0.0.1:port."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class HttpTest(PipelineTestCase):
    PREFIX = "seqpipe-http-"

    @classmethod
    def settings(cls):
        cls.port = free_port()
        return ["gateway.metrics_port=0", "batcher.metrics_port=0",
                f"gateway.http_endpoint=127.0.0.1:{cls.port}", "gateway.max_text_bytes=64",
                "batcher.max_queue_delay_us=1000"]

    def test_generate_equals_the_msgpack_path(self):
        expected = self.client.generate("teh speling", max_new_tokens=10)["text"]
        status, reply = http(self.port, "POST", "/v1/generate",
                             {"id": "h1", "text": "teh speling", "params": {"max_new_tokens": 10}})
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["id"], "h1")
        self.assertEqual(reply["status"], "ok")
        self.assertEqual(reply["text"], expected)
        self.assertIn("total", reply["timings_us"])
        status, reply = http(self.port, "POST", "/v1/generate",
                             {"texts": ["teh speling", "hello"], "params": {"max_new_tokens": 10}})
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["texts"][0], expected)

    def test_errors_map_to_http_statuses(self):
        cases = [
            ({"text": "a", "params": {"num_beams": "two"}}, 400, "invalid_argument"),
            ({"text": ""}, 400, "invalid_argument"),
            ({"text": "x" * 100}, 413, "too_long"),
            ({"text": "a long one", "timeout_ms": 1, "params": {"max_new_tokens": 60,
                                                               "min_new_tokens": 60}}, 504, "deadline_exceeded"),
        ]
        for body, status, code in cases:
            got_status, reply = http(self.port, "POST", "/v1/generate", body)
            self.assertEqual((got_status, reply["error"]["code"]), (status, code), body)
        status, reply = http(self.port, "POST", "/v1/generate", raw=b"{not json")
        self.assertEqual(status, 400)
        self.assertEqual(reply["error"]["code"], "invalid_argument")
        status, _ = http(self.port, "POST", "/v1/generate", raw=b"x" * (5 << 20))
        self.assertEqual(status, 413)
        status, reply = http(self.port, "POST", "/v1/generate", {"text": "still serving"})
        self.assertEqual(status, 200, reply)

    def test_kserve_v2(self):
        self.assertEqual(http(self.port, "GET", "/v2/health/live")[0], 200)
        self.assertEqual(http(self.port, "GET", "/v2/health/ready")[0], 200)
        name = os.path.basename(self.pipeline.model)
        status, meta = http(self.port, "GET", f"/v2/models/{name}")
        self.assertEqual(status, 200)
        self.assertEqual(meta["name"], name)
        self.assertEqual(meta["inputs"], [{"name": "text", "datatype": "BYTES", "shape": [-1]}])
        self.assertEqual(http(self.port, "GET", f"/v2/models/{name}/ready")[0], 200)
        self.assertEqual(http(self.port, "GET", "/v2/models/nope")[0], 404)
        expected = self.client.generate("hello world", max_new_tokens=8)["text"]
        status, out = http(self.port, "POST", f"/v2/models/{name}/infer", {
            "id": "k1", "parameters": {"max_new_tokens": 8},
            "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hello world"]}]})
        self.assertEqual(status, 200, out)
        self.assertEqual(out["id"], "k1")
        self.assertEqual(out["model_name"], name)
        self.assertEqual(out["outputs"][0]["name"], "text")
        self.assertEqual(out["outputs"][0]["datatype"], "BYTES")
        self.assertEqual(out["outputs"][0]["shape"], [1])
        self.assertEqual(out["outputs"][0]["data"], [expected])
        status, out = http(self.port, "POST", f"/v2/models/{name}/infer",
                           {"inputs": [{"name": "text", "shape": [1], "datatype": "FP32", "data": [1.0]}]})
        self.assertEqual(status, 400)
        self.assertIn("error", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
