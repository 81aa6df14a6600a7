"""OpenAI's completions API on the gateway against a real pipeline (`seqpipe up`, tiny model),
spoken by clients nobody here wrote, unmodified: the official `openai` npm package and Hugging
Face's `@huggingface/inference` (tests/e2e/openai/package.json pins both). Their answers equal
the msgpack path's; streamed text equals non-streamed text; errors come in OpenAI's shape.

The packages are installed with `npm ci` into SEQPIPE_NPM_DIR (default: a directory under
~/.cache named after the lock file's hash); without node or npm, or with no registry to install
from, the test is skipped, saying so.

Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py), PYTHONPATH with clients/python.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import PipelineTestCase, free_port, post_json, scrape  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = "teh speling"
# The decoder's cap, and the stream the client leaves early: long enough that the server is still
# generating when the client goes. Its text sits whole in the socket buffers, so it is the
# generation's time that must outlast the client's reaction: ~1.5 s on the tiny model was lost to a
# busy machine once; the wider, deeper decoder below (MODEL_ARGS) takes ~12 s.
LONG = 4096
GENERATE = os.environ.get("SEQPIPE_GENERATE") or os.path.join(
    os.path.dirname(os.environ["SEQPIPE_BIN"]), "seqpipe-generate")
CANCELLED = 'seqpipe_gateway_cancels_total{outcome="cancelled"}'


def npm_dir():
    """A directory holding node_modules as package-lock.json pins them, or raises SkipTest."""
    if not shutil.which("node") or not shutil.which("npm"):
        raise unittest.SkipTest("node and npm are needed to run the OpenAI and HF clients")
    with open(os.path.join(HERE, "package-lock.json"), "rb") as f:
        lock_hash = hashlib.sha256(f.read()).hexdigest()[:16]
    where = os.environ.get("SEQPIPE_NPM_DIR") or os.path.expanduser(
        f"~/.cache/seqpipe-e2e-npm/{lock_hash}")
    if os.path.isdir(os.path.join(where, "node_modules", "openai")):
        return where
    os.makedirs(where, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(HERE, name), where)
    done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=where,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise unittest.SkipTest("npm ci could not install the clients: " + done.stderr[-500:])
    return where


class OpenAiTest(PipelineTestCase):
    PREFIX = "seqpipe-openai-"
    MODEL_ARGS = ("--d-model", "256", "--d-ff", "1024", "--num-decoder-layers", "8")

    @classmethod
    def settings(cls):
        cls.port = free_port()
        cls.metrics = free_port()
        return [f"gateway.http_endpoint=127.0.0.1:{cls.port}", "gateway.max_text_bytes=64",
                "batcher.max_queue_delay_us=1000", f"gateway.metrics_port={cls.metrics}",
                f"decoder.max_new_tokens={LONG}", "decoder.metrics_port=0",
                # The long stream's deadline: the default (1 s) a busy machine overruns.
                "gateway.default_timeout_ms=30000"]

    @classmethod
    def setUpClass(cls):
        cls.modules = npm_dir()  # before the pipeline: a skip leaves nothing running
        super().setUpClass()
        cls.cancelled_before = scrape(cls.metrics, CANCELLED)
        script = os.path.join(cls.modules, "clients.mjs")
        shutil.copy(os.path.join(HERE, "clients.mjs"), script)  # resolves the packages there
        done = subprocess.run(["node", script, str(cls.port), PROMPT], capture_output=True,
                              text=True, timeout=120)
        if done.returncode != 0:
            cls.tearDownClass()
            raise RuntimeError("the clients failed:\n" + done.stderr)
        cls.got = json.loads(done.stdout)
        cls.reply = cls.client.generate(PROMPT, max_new_tokens=10)
        cls.expected = cls.reply["text"]

    def test_completions_equal_the_msgpack_path(self):
        self.assertEqual(self.got["models"], ["model"])  # the model directory's name
        self.assertEqual(self.got["model"], "model")
        self.assertEqual(self.got["completion"], self.expected)
        self.assertEqual(self.got["completion_object"], "text_completion")
        # The msgpack reply says why the text ended and what it took; OpenAI's names it its way.
        [usage] = self.reply["usage"]
        self.assertEqual(self.got["completion_finish"],
                         "length" if usage["finish_reason"] == "length" else "stop")
        self.assertEqual(self.got["completion_usage"], {
            "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"],
            "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]})
        self.assertEqual(self.got["chat_usage"], self.got["completion_usage"])
        self.assertEqual(self.got["chat_finish"], self.got["completion_finish"])
        hello = self.client.generate("hello", max_new_tokens=10)["text"]
        self.assertEqual(self.got["listed"], [self.expected, hello])
        self.assertEqual(self.got["chat"], self.expected)

    def test_usage_counts_the_tokenizers_tokens_and_the_generated_ones(self):
        # The prompt's tokens as the tokenizer makes them (eos included): seqpipe-generate's.
        out = subprocess.run([GENERATE, "--model", self.pipeline.model, "--text", PROMPT,
                              "--max-new-tokens", "3", "--threads", "1", "--json"],
                             check=True, capture_output=True, text=True, timeout=60)
        prompt_tokens = len(json.loads(out.stdout)["input_ids"])
        self.assertEqual(self.got["completion_usage"]["prompt_tokens"], prompt_tokens)
        # max_tokens 3 with min_tokens 3: cut by the length, 3 tokens generated.
        self.assertEqual(self.got["cut_finish"], "length")
        self.assertEqual(self.got["cut_usage"], {"prompt_tokens": prompt_tokens,
                                                 "completion_tokens": 3,
                                                 "total_tokens": prompt_tokens + 3})
        chunks = self.got["usage_chunks"]
        self.assertTrue(all(c["usage"] is None for c in chunks[:-1]), chunks)
        self.assertEqual(chunks[-2]["finish"], "length")
        self.assertEqual(chunks[-1]["choices"], 0)
        self.assertEqual(chunks[-1]["usage"], self.got["cut_usage"])

    def test_streamed_text_equals_the_whole(self):
        self.assertEqual(self.got["streamed"], self.got["completion"])
        self.assertGreaterEqual(self.got["chunks"], 2)  # the text's pieces, then the ending
        self.assertEqual(self.got["stream_finish"], self.got["completion_finish"])
        self.assertFalse(self.got["stream_usage_key"])  # usage only when asked
        self.assertEqual(self.got["chat_streamed"], self.got["chat"])

    def test_seeded_sampling_repeats(self):
        self.assertEqual(self.got["sampled"][0], self.got["sampled"][1])

    def test_errors_in_openai_shape(self):
        n = self.got["n_error"]
        self.assertEqual((n["status"], n["type"], n["param"]), (400, "invalid_request_error", "n"))
        too_long = self.got["too_long_error"]
        self.assertEqual((too_long["status"], too_long["code"]), (413, "too_long"))
        stream = self.got["stream_error"]
        self.assertEqual((stream["status"], stream["code"]), (400, "invalid_argument"))
        self.assertIn("max_new_tokens", stream["message"])
        status, body = post_json(self.port, "/v1/chat/completions",
                                 {"model": "t5", "messages": [{"role": "system", "content": "x"}]})
        self.assertEqual(status, 400)
        self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
        self.assertEqual(body["error"]["param"], "messages")

    def test_leaving_a_stream_cancels_its_request(self):
        self.assertTrue(self.got["left_after"])
        deadline = time.monotonic() + 10
        while scrape(self.metrics, CANCELLED) <= self.cancelled_before:
            self.assertLess(time.monotonic(), deadline, "the request was not cancelled")
            time.sleep(0.05)

    def test_hugging_face_client_on_the_endpoint_url(self):
        self.assertEqual(self.got["hf"], self.expected)


if __name__ == "__main__":
    unittest.main()
