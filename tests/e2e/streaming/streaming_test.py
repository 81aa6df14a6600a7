"""Streaming end to end (`seqpipe up`, tiny model): a request with "stream": true gets partial
replies as the decoder produces tokens, then its final reply, over msgpack and over HTTP
server-sent events. Checks: the partials add up to the final text, which equals the same request's
non-streamed reply (with and without a stop sequence); a long output gets partials while it is
decoded; a streamed request cancelled mid-way, one past its deadline and an SSE client that
goes away each end cleanly (one final reply; the decoder stops the sequence) and the gateway keeps
serving; streams the protocol refuses get invalid_argument.

Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py), PYTHONPATH with clients/python.
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import time
import unittest

import msgpack
import zmq
from seqpipe_client import Client

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import SEQPIPE, TWO_OF_EACH, PipelineTestCase, free_port, scrape  # noqa: E402

# Tokens: a sequence runs for about 0.5 s on the tiny model, 10 to 40 times longer than its first
# partial takes to reach the client, so a cancel after the first partial finds it at the decoder.
ENDLESS = 3000
# Its deadline: the default (1 s) is only 2x that, which a machine busy with builds overruns.
LONG_MS = 30000


def sse_events(port, body, read_events=None):
    """(HTTP status, content type, the JSON of each `data:` event) of one streamed POST
    /v1/generate; with read_events, the connection is closed after that many events."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/generate", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    events = []
    if response.getheader("Content-Type", "").startswith("text/event-stream"):
        while read_events is None or len(events) < read_events:
            line = response.fp.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                events.append(json.loads(line[len(b"data: "):]))
    else:
        events.append(json.loads(response.read()))
    status, content_type = response.status, response.getheader("Content-Type", "")
    if read_events is not None:  # go away without reading the rest
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.sock.close()
    else:
        conn.close()
    return status, content_type, events


class StreamingTest(PipelineTestCase):
    PREFIX = "seqpipe-streaming-"

    @classmethod
    def settings(cls):
        cls.port = free_port()
        cls.gateway_metrics = free_port()
        return [f"gateway.metrics_port={cls.gateway_metrics}", "batcher.metrics_port=0",
                "decoder.metrics_port=0",
                f"gateway.http_endpoint=127.0.0.1:{cls.port}", f"decoder.max_new_tokens={ENDLESS}",
                "batcher.max_queue_delay_us=1000", *TWO_OF_EACH]

    def dealer(self):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.pipeline.endpoint)
        self.addCleanup(sock.close)
        return sock

    @staticmethod
    def replies(sock, rid, cancel_after_partials=None, wait_s=30):
        """Every reply to `rid` until its final one (partials first); with cancel_after_partials,
        a cancel is sent once that many partials came."""
        got = []
        until = time.monotonic() + wait_s
        while time.monotonic() < until:
            if not sock.poll(100):
                continue
            reply = msgpack.unpackb(sock.recv_multipart()[-1], raw=False)
            if reply["id"] != rid:
                continue
            got.append(reply)
            partials = sum(r["status"] == "partial" for r in got)
            if cancel_after_partials is not None and partials == cancel_after_partials:
                sock.send_multipart([b"", msgpack.packb({"v": 1, "op": "cancel", "id": rid})])
            if reply["status"] != "partial":
                return got
        raise AssertionError(f"no final reply to {rid}: {got}")

    def decoder_cancelled(self):  # both decoder replicas'
        return sum(self.pipeline.samples("decoder", 2, 'seqpipe_stage_cancelled_items_total{stage="decoder"}'))

    def assert_still_serving(self):
        self.assertEqual(self.client.generate("still serving", max_new_tokens=5)["status"], "ok")

    def test_partials_add_up_to_the_final_text_over_msgpack(self):
        for params in [{"max_new_tokens": ENDLESS, "min_new_tokens": ENDLESS, "timeout_ms": LONG_MS},
                       {"max_new_tokens": 40}]:
            expected = self.client.generate("teh speling is bad", **params)["text"]
            replies = list(self.client.stream("teh speling is bad", **params))
            partials, final = replies[:-1], replies[-1]
            self.assertEqual(final["status"], "ok")
            self.assertTrue(all(r["status"] == "partial" for r in partials))
            self.assertEqual(final["text"], expected)
            self.assertEqual("".join(r["text"] for r in partials), expected)
            if params["max_new_tokens"] == ENDLESS:  # partials came while it was decoded, not
                self.assertGreater(len(partials), 1)  # only the rest sent with the final reply
        # With a stop sequence: a word of the output ends it, in partials and final alike.
        words = expected.split(" ")
        stop = words[len(words) // 2]
        expected = self.client.generate("teh speling is bad", max_new_tokens=40, stop=[stop])["text"]
        self.assertLess(len(expected), len(self.client.generate("teh speling is bad",
                                                                max_new_tokens=40)["text"]))
        replies = list(self.client.stream("teh speling is bad", max_new_tokens=40, stop=[stop]))
        self.assertEqual(replies[-1]["text"], expected)
        self.assertEqual("".join(r["text"] for r in replies[:-1]), expected)

    def test_a_stream_sent_again_while_in_flight_is_streamed_once(self):
        # A client whose retry_after is shorter than the stream: its resends (same id, same
        # connection) reach the gateway while the first is in flight, and are that one.
        params = {"max_new_tokens": 200, "min_new_tokens": 200, "timeout_ms": LONG_MS}
        expected = self.client.generate("teh speling is bad", **params)["text"]
        with Client(self.pipeline.endpoint, timeout_ms=LONG_MS, retry_after_ms=1,
                    max_attempts=3) as impatient:
            replies = list(impatient.stream("teh speling is bad", **params))
        self.assertEqual(replies[-1]["text"], expected)
        self.assertEqual("".join(r["text"] for r in replies[:-1]), expected)

    def test_partials_add_up_to_the_final_text_over_sse(self):
        params = {"max_new_tokens": ENDLESS, "min_new_tokens": ENDLESS}
        expected = self.client.generate("hello there", timeout_ms=LONG_MS, **params)["text"]
        status, content_type, events = sse_events(self.port, {
            "id": "s1", "text": "hello there", "params": params, "stream": True, "timeout_ms": LONG_MS})
        self.assertEqual(status, 200)
        self.assertTrue(content_type.startswith("text/event-stream"), content_type)
        partials, final = events[:-1], events[-1]
        self.assertGreater(len(partials), 1)
        self.assertTrue(all(e["status"] == "partial" and e["id"] == "s1" for e in partials))
        self.assertEqual((final["status"], final["id"], final["text"]), ("ok", "s1", expected))
        self.assertEqual("".join(e["text"] for e in partials), expected)

    def test_seqpipe_send_stream_prints_the_text_as_it_comes(self):
        expected = self.client.generate("teh speling is bad", max_new_tokens=40)["text"]
        out = subprocess.run([SEQPIPE, "send", "--set", f"runtime_dir={self.pipeline.run_dir}",
                              "--endpoint", self.pipeline.endpoint, "--max-new-tokens", "40",
                              "--stream", "teh speling is bad"], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        lines = out.stdout.split("\n")
        self.assertEqual(lines[0], expected)
        self.assertTrue(lines[1].startswith("timings (us):"), out.stdout)

    def test_refused_streams(self):
        sock = self.dealer()
        for i, request in enumerate([{"texts": ["a", "b"]}, {"text": "a", "params": {"num_beams": 2}},
                                     {"text": "a", "stream": 1}]):
            rid = f"bad{i}"
            sock.send_multipart([b"", msgpack.packb({"v": 1, "id": rid, "stream": True, **request})])
            (reply,) = self.replies(sock, rid)
            self.assertEqual(reply["error"]["code"], "invalid_argument", request)
        status, content_type, (reply,) = sse_events(
            self.port, {"text": "a", "params": {"num_beams": 2}, "stream": True})
        self.assertEqual((status, reply["error"]["code"]), (400, "invalid_argument"))
        self.assertTrue(content_type.startswith("application/json"))
        self.assert_still_serving()

    def test_cancelled_mid_way_and_past_deadline(self):
        sock = self.dealer()
        before = self.decoder_cancelled()
        sock.send_multipart([b"", msgpack.packb({
            "v": 1, "id": "c1", "text": "cancel me", "stream": True, "timeout_ms": 30000,
            "params": {"max_new_tokens": ENDLESS, "min_new_tokens": ENDLESS}})])
        got = self.replies(sock, "c1", cancel_after_partials=1)
        self.assertGreaterEqual(len(got), 2)
        self.assertEqual(got[-1]["error"]["code"], "cancelled")
        self.assertEqual(sum(r["status"] != "partial" for r in got), 1)
        deadline = time.monotonic() + 10
        while self.decoder_cancelled() <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertGreater(self.decoder_cancelled(), before)

        sock.send_multipart([b"", msgpack.packb({
            "v": 1, "id": "d1", "text": "too slow", "stream": True, "timeout_ms": 300,
            "params": {"max_new_tokens": ENDLESS, "min_new_tokens": ENDLESS}})])
        got = self.replies(sock, "d1")
        self.assertEqual(got[-1]["error"]["code"], "deadline_exceeded")
        self.assertGreaterEqual(len(got), 2, "partials came before the deadline")
        time.sleep(0.5)  # nothing more for either
        self.assertFalse(sock.poll(200))
        self.assert_still_serving()

    def test_sse_client_going_away_cancels_the_request(self):
        def cancels():
            return scrape(self.gateway_metrics, 'seqpipe_gateway_cancels_total{outcome="cancelled"}')
        before, decoder_before = cancels(), self.decoder_cancelled()
        status, _, events = sse_events(
            self.port, {"text": "leaving early", "stream": True, "timeout_ms": 30000,
                        "params": {"max_new_tokens": ENDLESS, "min_new_tokens": ENDLESS}},
            read_events=1)
        self.assertEqual(status, 200)
        self.assertEqual([e["status"] for e in events], ["partial"])
        deadline = time.monotonic() + 10
        while cancels() <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertGreater(cancels(), before)
        while self.decoder_cancelled() <= decoder_before and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertGreater(self.decoder_cancelled(), decoder_before)  # the decoder stopped it
        self.assert_still_serving()
        status, _, events = sse_events(self.port, {"text": "after", "stream": True,
                                                   "params": {"max_new_tokens": 8}})
        self.assertEqual((status, events[-1]["status"]), (200, "ok"))


if __name__ == "__main__":
    unittest.main()
