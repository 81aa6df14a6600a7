"""text-generation-inference's API on the gateway against a real pipeline (`seqpipe up`, tiny
model), spoken by curl as TGI's documentation shows: POST /generate and /generate_stream, GET
/info and /health. The text equals the msgpack path's; the streamed tokens join to the whole
text; refused requests come in TGI's error shape with its statuses.

Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py), PYTHONPATH with clients/python.
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import PipelineTestCase, free_port  # noqa: E402

PROMPT = "teh speling"


def curl(port, path, body=None):
    """(HTTP status, body text) of curl's request; a POST when `body` is given."""
    args = ["curl", "-sN", "--max-time", "20", "-w", "\n%{http_code}",
            f"http://127.0.0.1:{port}{path}"]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    text, _, status = out.rpartition("\n")
    return int(status), text


def events(text):
    """The JSON of each `data:` line of a server-sent event stream."""
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


class TgiTest(PipelineTestCase):
    PREFIX = "seqpipe-tgi-"

    @classmethod
    def settings(cls):
        cls.port = free_port()
        return [f"gateway.http_endpoint=127.0.0.1:{cls.port}", "gateway.max_text_bytes=64",
                "batcher.max_queue_delay_us=1000"]

    def test_generate_equals_the_msgpack_path(self):
        expected = self.client.generate(PROMPT, max_new_tokens=10)["text"]
        status, body = curl(self.port, "/generate",
                            {"inputs": PROMPT, "parameters": {"max_new_tokens": 10}})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body), {"generated_text": expected})

    def test_streamed_tokens_join_to_the_text(self):
        request = {"inputs": PROMPT, "parameters": {"max_new_tokens": 10}}
        _, whole = curl(self.port, "/generate", request)
        status, body = curl(self.port, "/generate_stream", request)
        self.assertEqual(status, 200, body)
        got = events(body)
        self.assertGreaterEqual(len(got), 2, body)
        self.assertEqual([e["index"] for e in got], list(range(len(got))))
        joined = "".join(e["token"]["text"] for e in got if not e["token"]["special"])
        self.assertEqual(joined, json.loads(whole)["generated_text"])
        self.assertEqual(got[-1]["generated_text"], joined)
        self.assertTrue(all(e["generated_text"] is None for e in got[:-1]))

    def test_details_say_why_the_text_ended(self):
        # The model's own end, or the length, as the msgpack reply says.
        [usage] = self.client.generate(PROMPT, max_new_tokens=10)["usage"]
        status, body = curl(self.port, "/generate", {
            "inputs": PROMPT, "parameters": {"max_new_tokens": 10, "details": True}})
        self.assertEqual(status, 200, body)
        details = json.loads(body)["details"]
        self.assertEqual(details["finish_reason"],
                         {"eos": "eos_token", "length": "length"}[usage["finish_reason"]])
        self.assertEqual(details["generated_tokens"], usage["completion_tokens"])
        # TGI has no min_new_tokens: a stop sequence of the text's first word ends it there.
        first = json.loads(curl(self.port, "/generate", {
            "inputs": PROMPT, "parameters": {"max_new_tokens": 10}})[1])["generated_text"]
        if first.strip():
            stop = first.split()[0]
            _, body = curl(self.port, "/generate", {
                "inputs": PROMPT,
                "parameters": {"max_new_tokens": 10, "details": True, "stop": [stop]}})
            self.assertEqual(json.loads(body)["details"]["finish_reason"], "stop_sequence", body)
        # max_new_tokens 1: one token, eos or not.
        _, body = curl(self.port, "/generate", {
            "inputs": PROMPT, "parameters": {"max_new_tokens": 1, "details": True}})
        self.assertEqual(json.loads(body)["details"]["generated_tokens"], 1)

    def test_the_streams_last_event_carries_details(self):
        [usage] = self.client.generate(PROMPT, max_new_tokens=2)["usage"]
        if usage["finish_reason"] == "length":
            self.assertEqual(usage["completion_tokens"], 2)
        _, body = curl(self.port, "/generate_stream", {
            "inputs": PROMPT, "parameters": {"max_new_tokens": 2, "details": True}})
        got = events(body)
        self.assertTrue(all(e["details"] is None for e in got[:-1]), body)
        self.assertEqual(got[-1]["details"], {
            "finish_reason": {"eos": "eos_token", "length": "length"}[usage["finish_reason"]],
            "generated_tokens": usage["completion_tokens"],
            "input_length": usage["prompt_tokens"], "seed": None})
        _, body = curl(self.port, "/generate_stream", {"inputs": PROMPT})
        self.assertIsNone(events(body)[-1]["details"])  # not asked

    def test_seeded_sampling_repeats(self):
        request = {"inputs": PROMPT,
                   "parameters": {"max_new_tokens": 10, "temperature": 0.8, "seed": 11}}
        self.assertEqual(curl(self.port, "/generate", request), curl(self.port, "/generate",
                                                                     request))

    def test_errors_in_tgi_shape(self):
        cases = [({"inputs": PROMPT, "parameters": {"max_new_tokens": 1000}}, 422, "validation"),
                 ({"inputs": "x" * 100}, 422, "validation"),
                 ({"inputs": PROMPT, "parameters": {"best_of": 2}}, 422, "validation"),
                 ({"text": PROMPT}, 422, "validation")]
        for request, status, error_type in cases:
            got, body = curl(self.port, "/generate", request)
            self.assertEqual(got, status, (request, body))
            self.assertEqual(json.loads(body)["error_type"], error_type, body)
            got, body = curl(self.port, "/generate_stream", request)
            self.assertEqual(got, status, (request, body))
        status, body = curl(self.port, "/generate",
                            {"inputs": PROMPT, "parameters": {"decoder_input_details": True}})
        self.assertIn("parameters.decoder_input_details", json.loads(body)["error"])

    def test_info_and_health(self):
        status, body = curl(self.port, "/info")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["model_id"], "model")
        self.assertEqual(curl(self.port, "/health")[0], 200)
        # A route taken with another method says which it takes.
        status, body = curl(self.port, "/generate")
        self.assertEqual(status, 405, body)
        self.assertIn("use POST", json.loads(body)["error"])


if __name__ == "__main__":
    unittest.main()
