"""The README's and docs/PROTOCOL.md's stream examples, read from the docs and run as written (only
the ports and the stubs' folder moved) against the bundled speller: plain `seqpipe up` in the
checkout (config/pipeline.yaml and models/speller-t5 with its seqpipe.yaml, whose postprocessor
rewrites words after decoding), HTTP and gRPC on. Each stream must be answered (a refused one is
a 400 or an error response), its pieces must add up to the text the same request without
`stream` gets, and where a doc shows the pieces, they must be the pieces sent: curl's SSE
(README and PROTOCOL), TGI's /generate_stream with curl, the official OpenAI npm client (the
README's one-liner, not a stream, and PROTOCOL's example, each pasted in the checkout's root
after the README's `npm ci --prefix clients/node`; skipped without node and npm or a registry),
grpcio's ModelStreamInfer, and msgpack partials from the Python client, with 200 held-out noisy
inputs (tests/data/speller-t5-greedy.json) as typed and capitalised with punctuation too.

Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py), PYTHONPATH with clients/python.
"""
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from harness import PipelineTestCase, free_port, kserve_stubs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
README = os.path.join(ROOT, "README.md")
PROTOCOL = os.path.join(ROOT, "docs", "PROTOCOL.md")


def doc_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


def doc_line(path, pattern):
    """The first line of the doc that matches `pattern` (a regex), without a trailing comment."""
    for line in doc_lines(path):
        if re.search(pattern, line):
            return re.sub(r"\s+#\s.*$", "", line.strip())
    raise AssertionError(f"no line of {path} matches {pattern!r}")


def doc_block(path, first, last):
    """The doc's lines from the first matching `first` to the next matching `last`, and the
    `# ` comment lines right after it (the output the doc shows)."""
    lines = doc_lines(path)
    start = next(i for i, line in enumerate(lines) if re.search(first, line))
    end = next(i for i in range(start, len(lines)) if re.search(last, lines[i]))
    shown = []
    for line in lines[end + 1:]:
        if not line.strip().startswith("# "):
            break
        shown.append(line.strip()[2:])
    return "\n".join(lines[start:end + 1]), shown


def sse_events(body):
    return [json.loads(line[len("data: "):]) for line in body.split("\n")
            if line.startswith("data: ") and line != "data: [DONE]"]


def shown_texts(shown, key):
    """The texts of the events a doc shows (`# data: {...}` lines), up to a `...` line."""
    texts = []
    for line in shown:
        if not line.startswith("data: "):
            break
        event = json.loads(line[len("data: "):].replace("{...}", "{}").replace("[...]", "[]"))
        texts.append(key(event))
    return texts


class StreamExamplesTest(PipelineTestCase):
    PREFIX = "seqpipe-e2e-stream-examples-"
    CHECKOUT = ROOT
    CLIENT_TIMEOUT_MS = 30000

    @classmethod
    def settings(cls):
        cls.port, cls.grpc_port = free_port(), free_port()
        # The response cache off (pipeline.yaml's default): every stream is decoded, none is one
        # cached piece.
        return [f"gateway.http_endpoint=127.0.0.1:{cls.port}",
                f"gateway.grpc_endpoint=127.0.0.1:{cls.grpc_port}", "gateway.cache_bytes=0",
                "gateway.default_timeout_ms=30000"] + [
            f"{stage}.metrics_port=0" for stage in
            ("gateway", "batcher", "tokenizer", "encoder", "decoder", "postprocessor")]

    def run_shell(self, command, cwd=None, env=None):
        command = command.replace("localhost:8000", f"localhost:{self.port}")
        command = command.replace("127.0.0.1:8001", f"127.0.0.1:{self.grpc_port}")
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                              timeout=120, cwd=cwd or ROOT, env=env)
        self.assertEqual(done.returncode, 0, command + "\n" + done.stderr)
        return done.stdout

    def whole(self, text):
        return self.client.generate(text)["text"]

    def check_sse(self, command, shown=()):
        events = sse_events(self.run_shell(command))
        self.assertGreaterEqual(len(events), 2, events)  # a refused stream is one JSON error
        *partials, final = events
        self.assertTrue(all(e["status"] == "partial" for e in partials), events)
        self.assertEqual(final["status"], "ok", final)
        text = json.loads(re.search(r"-d '(.*)'", command).group(1))["text"]
        self.assertEqual("".join(e["text"] for e in partials), final["text"])
        self.assertEqual(final["text"], self.whole(text))
        # What the doc shows is today's text (the pieces a stream not hurried gets; a busy
        # pipeline may send a piece later, joined with the next).
        self.assertTrue(final["text"].startswith("".join(shown)), shown)
        return partials

    def test_the_readmes_sse_example(self):
        command = doc_line(README, r"^curl -N localhost:8000/v1/generate .*\"stream\": true")
        self.check_sse(command)

    def test_protocols_sse_example_sends_the_pieces_it_shows(self):
        command, shown = doc_block(PROTOCOL, r"^\s*curl -N localhost:8000/v1/generate",
                                   r"^\s*curl -N localhost:8000/v1/generate")
        shown = shown_texts(shown, lambda e: e["text"])
        self.assertGreaterEqual(len(shown), 2)  # the doc shows the text word by word
        self.check_sse(command.strip(), shown)

    def test_protocols_tgi_stream_example(self):
        command, shown = doc_block(PROTOCOL, r"^curl -N localhost:8000/generate_stream",
                                   r"^curl -N localhost:8000/generate_stream")
        events = sse_events(self.run_shell(command))
        self.assertGreaterEqual(len(events), 2, events)
        text = json.loads(re.search(r"-d '(.*)'", command).group(1))["inputs"]
        self.assertEqual(events[-1]["generated_text"], self.whole(text))
        self.assertEqual("".join(e["token"]["text"] for e in events), events[-1]["generated_text"])
        shown = shown_texts(shown, lambda e: e["token"]["text"])
        self.assertTrue(events[-1]["generated_text"].startswith("".join(shown)), shown)

    def install_the_readmes_node_client(self):
        """The README's `npm ci --prefix clients/node`, run as pasted in the checkout, or a skip
        where node and npm or a registry to install from are missing."""
        if not shutil.which("node") or not shutil.which("npm"):
            self.skipTest("node and npm are needed to run the official OpenAI client")
        command = doc_line(README, r"^npm ci --prefix clients/node")
        try:
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                                  timeout=300, cwd=ROOT)
        except subprocess.TimeoutExpired:  # a registry that does not answer
            self.skipTest(f"{command} did not finish in 300 s")
        if done.returncode != 0:
            self.skipTest(f"{command} could not install the client: {done.stderr[-500:]}")

    def test_the_readmes_openai_one_liner_as_pasted(self):
        self.install_the_readmes_node_client()
        command = doc_line(README, r"^\(cd clients/node && node --input-type=module -e ")
        self.assertEqual(self.run_shell(command), self.whole("teh speling") + "\n")

    def test_protocols_openai_example_with_the_official_client(self):
        self.install_the_readmes_node_client()
        command, _ = doc_block(PROTOCOL, r"^npm ci --prefix clients/node",
                               r"process\.stdout\.write\(c\.choices\[0\]\.text\);'\)$")
        self.assertIn("stream: true", command)
        out = self.run_shell(command)  # from the checkout's root, the install included
        want = self.whole("teh speling")
        # After npm's lines: the completion, then the streamed pieces.
        self.assertTrue(out.endswith("\n" + want + "\n" + want), out)

    def test_protocols_grpc_stream_example_prints_what_it_shows(self):
        try:
            import grpc_tools  # noqa: F401
        except ImportError:
            self.skipTest("python3-grpc-tools is not installed")
        block, shown = doc_block(PROTOCOL, r"^PYTHONPATH=/tmp/kserve python3 -c '$",
                                 r"triton_final_response")
        command = block[block.rindex("PYTHONPATH=/tmp/kserve"):]  # ModelInfer's block is first
        self.assertIn("ModelStreamInfer", command)
        with tempfile.TemporaryDirectory() as stubs:
            kserve_stubs(stubs)
            # The doc's python3 is Debian's, where python3-grpcio is installed.
            env = dict(os.environ, PATH="/usr/bin:" + os.environ.get("PATH", ""))
            out = self.run_shell(command.replace("/tmp/kserve", stubs), env=env)
        want = self.whole("teh speling is bad")
        for lines in (out.rstrip("\n").split("\n"), shown):  # what it printed, what the doc shows
            pieces = [ast.literal_eval(line.rsplit(" ", 1)[0]) for line in lines]
            finals = [line.rsplit(" ", 1)[1] for line in lines]
            self.assertEqual(finals, ["False"] * (len(lines) - 1) + ["True"], lines)
            self.assertEqual("".join(pieces), want, lines)
        self.assertGreaterEqual(len(shown), 3)  # word by word, then the final response

    def test_protocols_msgpack_example_sends_the_partials_it_shows(self):
        lines = doc_lines(PROTOCOL)
        start = lines.index('request  {"v": 1, "id": "r1", "text": "teh speling is bad", "stream": true}')
        shown = []
        for line in lines[start + 1:]:
            if '"status": "partial"' not in line:
                break
            shown.append(json.loads(re.sub(r"^(replies)?\s*", "", line))["text"])
        self.assertGreaterEqual(len(shown), 2)
        parts = list(self.client.stream("teh speling is bad"))
        self.assertEqual(parts[-1]["status"], "ok")
        self.assertEqual("".join(p["text"] for p in parts[:-1]), parts[-1]["text"])
        self.assertEqual("".join(shown), parts[-1]["text"])

    def test_streams_of_real_inputs_add_up_to_the_text_without_stream(self):
        with open(os.path.join(ROOT, "tests", "data", "speller-t5-greedy.json")) as f:
            cases = json.load(f)["cases"]
        early = 0
        for case in cases:
            for text in (case["text"], case["text"].capitalize() + ". And " + case["text"] + "!"):
                parts = list(self.client.stream(text))
                self.assertEqual(parts[-1]["status"], "ok")
                self.assertTrue(all(p["status"] == "partial" for p in parts[:-1]))
                self.assertEqual("".join(p["text"] for p in parts[:-1]), parts[-1]["text"], text)
                self.assertEqual(parts[-1]["text"], self.whole(text), text)
                early += len(parts) > 2  # a piece before the last one
        print(f"{early} of {2 * len(cases)} streams sent a piece before the end", file=sys.stderr)
        self.assertGreater(early, len(cases) // 5)  # word by word, not only the whole text


if __name__ == "__main__":
    unittest.main()
