"""HTTP on the gateway against a real pipeline (`seqpipe up`, tiny model): POST /v1/generate and the
KServe v2 endpoints, as curl would send them (urllib); every error code's HTTP status; the JSON
reply equals the msgpack path's; bad bodies answered and the gateway kept serving.

Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py), PYTHONPATH with clients/python.
"""
import json
from http.client import HTTPConnection
import os
import select
import socket
import subprocess
import tempfile
import threading
import sys
import time
import unittest
import urllib.error
import urllib.request

import msgpack

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


def curl_status(port, path, data, chunked=False):
    """The HTTP status curl gets for POSTing `data` (from a file; chunked when asked)."""
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        args = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20",
                "--data-binary", "@" + f.name, f"http://127.0.0.1:{port}{path}"]
        if chunked:
            args[1:1] = ["-H", "Transfer-Encoding: chunked"]
        return int(subprocess.run(args, capture_output=True, text=True).stdout or 0)


def chunked_upload(port, chunk=64 << 10, total=64 << 20):
    """POSTs up to `total` bytes in chunks until the server answers or closes; returns (the
    status line it answered with, or b"" if none; the bytes sent by then). A server that closes
    with the upload unread resets the connection, but what it wrote first can still be read."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = f"{chunk:x}\r\n".encode() + b"x" * chunk + b"\r\n"
        sent = 0
        try:
            while sent < total and not select.select([s], [], [], 0)[0]:
                s.sendall(piece)
                sent += chunk
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            return s.recv(4096).split(b"\r\n")[0], sent
        except OSError:
            return b"", sent


class SlowClients:
    """`slow` connections sending a request's headers one byte a second and `idle` connections
    that send nothing, for as long as the with-block lasts."""

    def __init__(self, port, slow, idle):
        self.port, self.stop = port, threading.Event()
        self.idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(idle)]
        self.slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(slow)]
        self.thread = threading.Thread(target=self.trickle)

    def trickle(self):
        head = b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4096
        for byte in head:
            for s in self.slow:
                try:
                    s.send(bytes([byte]))
                except OSError:
                    pass
            if self.stop.wait(1):
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        for s in self.idle + self.slow:
            s.close()


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
        self.assertEqual(curl_status(self.port, "/v1/generate", b"x" * (5 << 20)), 413)
        status, reply = http(self.port, "POST", "/v1/generate", {"text": "still serving"})
        self.assertEqual(status, 200, reply)

    def test_head_is_get_without_the_body(self):
        for path in ("/v2/health/live", "/v1/models"):
            connection = HTTPConnection("127.0.0.1", self.port, timeout=10)
            connection.request("GET", path)
            got = connection.getresponse()
            body = got.read()
            connection.request("HEAD", path)
            head = connection.getresponse()
            # The same status and type as GET, no body (evhttp also leaves out Content-Length,
            # which RFC 9110 allows a HEAD reply to).
            self.assertEqual((got.status, len(body) > 0), (200, True), path)
            self.assertEqual((head.status, head.read()), (200, b""), path)
            self.assertEqual(head.getheader("Content-Type"), got.getheader("Content-Type"), path)
            connection.close()
        status, reply = http(self.port, "HEAD", "/v1/generate")
        self.assertEqual(status, 405)

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


    def test_refusals_before_the_id_is_read_answer_at_once(self):
        """The gateway refuses these before it reads the id; each HTTP request still gets its
        answer at once (not after timeout_ms), with the code the msgpack path gets for it."""
        nested = {"x": 1}
        for _ in range(11):
            nested = {"x": nested}
        cases = [
            {"text": "a", "pad": "x" * (3 << 19)},  # 1.5 MiB: over gateway.max_message_bytes
            {"text": "a", "params": nested},
            {"text": "a", "params": {f"k{i}": i for i in range(100)}},
            {"texts": ["a"] * 2000},
        ]
        for body in cases:
            body = {"v": 1, **body, "timeout_ms": 20000}
            reply = self.client.call_raw(msgpack.packb(body), wait_ms=5000)
            self.assertEqual(reply["status"], "error", str(body)[:80])
            code = reply["error"]["code"]
            started = time.monotonic()
            status, reply = http(self.port, "POST", "/v1/generate", body)
            self.assertLess(time.monotonic() - started, 3, str(body)[:80])
            self.assertGreaterEqual(status, 400)
            self.assertEqual(reply["error"]["code"], code, str(body)[:80])
        # A client waiting on its id gets the refusal at once too: the gateway reads the id of a
        # request it refuses to unpack.
        started = time.monotonic()
        with self.assertRaisesRegex(Exception, "too_long"):
            self.client.generate(["a"] * 2000, timeout_ms=20000)
        self.assertLess(time.monotonic() - started, 3)
        name = os.path.basename(self.pipeline.model)
        started = time.monotonic()
        status, out = http(self.port, "POST", f"/v2/models/{name}/infer", {
            "parameters": {"timeout_ms": 20000},
            "inputs": [{"name": "text", "shape": [2000], "datatype": "BYTES", "data": ["a"] * 2000}]})
        self.assertLess(time.monotonic() - started, 3)
        self.assertEqual(status, 413, out)
        started = time.monotonic()
        status, reply = http(self.port, "POST", "/v1/generate", {"op": "cancel", "id": "x"})
        self.assertLess(time.monotonic() - started, 3)
        self.assertEqual((status, reply["error"]["code"]), (400, "invalid_argument"))

    def test_slow_and_idle_clients_stall_nobody(self):
        body = {"text": "teh speling", "params": {"max_new_tokens": 10}}
        with SlowClients(self.port, slow=16, idle=40):
            for _ in range(3):
                started = time.monotonic()
                status, reply = http(self.port, "POST", "/v1/generate", body)
                self.assertEqual(status, 200, reply)
                self.assertLess(time.monotonic() - started, 2)
                time.sleep(1)  # the slow clients send more meanwhile

    def test_oversized_bodies_and_urls_are_refused_at_once(self):
        started = time.monotonic()
        line, sent = chunked_upload(self.port)
        self.assertIn(b" 413 ", line)
        # The limit is 4 MiB; the rest sat in the two kernels' socket buffers.
        self.assertLess(sent, 16 << 20, "refused as the chunks passed the limit, not at the end")
        self.assertEqual(curl_status(self.port, "/v1/generate", b"x" * (5 << 20), chunked=True), 413)
        self.assertEqual(curl_status(self.port, "/x" * 50000, b"{}") // 100, 4)
        self.assertLess(time.monotonic() - started, 10)
        status, reply = http(self.port, "POST", "/v1/generate", {"text": "still serving"})
        self.assertEqual(status, 200, reply)

    def test_a_client_too_slow_to_deliver_its_request_is_closed(self):
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.settimeout(1)
            started, closed = time.monotonic(), None
            for byte in b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 30:
                try:
                    s.send(bytes([byte]))
                    if s.recv(100) == b"":
                        closed = time.monotonic() - started
                        break
                except socket.timeout:
                    continue
                except OSError:
                    closed = time.monotonic() - started
                    break
        # Its whole-request time is 10 s, though it was never idle for the 5 s idle limit.
        self.assertIsNotNone(closed, "a byte a second kept the connection open for 30 s")
        self.assertGreater(closed, 9)
        self.assertLess(closed, 15)

    # Runs after the slow client above was cut off (tests run by name): a connection closed a
    # moment before must not count against the limit.
    def test_connections_past_the_limit_are_answered_503(self):
        idle = [socket.create_connection(("127.0.0.1", self.port)) for _ in range(512)]
        try:
            time.sleep(0.5)  # the gateway has counted them
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as extra:
                answer = extra.recv(100)
                self.assertTrue(answer.startswith(b"HTTP/1.1 503 "), answer)
        finally:
            for s in idle:
                s.close()
        time.sleep(0.5)  # and seen them go
        status, reply = http(self.port, "POST", "/v1/generate", {"text": "still serving"})
        self.assertEqual(status, 200, reply)


if __name__ == "__main__":
    unittest.main(verbosity=2)
