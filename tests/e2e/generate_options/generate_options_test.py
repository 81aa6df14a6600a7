"""HF generate()'s options through a real pipeline (`seqpipe up`, tiny model, two replicas per
stage): seeded sampling repeated gives the same text, alone or among other requests, over msgpack
(Python client), HTTP JSON and `seqpipe send` (the C++ client); num_return_sequences' hypotheses
with their scores; stop sequences cut the text; bad values answered invalid_argument.

Environment: SEQPIPE_BIN, SEQPIPE_MKMODEL (tests/e2e/harness.py), PYTHONPATH with clients/python.
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import SEQPIPE, TWO_OF_EACH, PipelineTestCase, free_port, post_json  # noqa: E402
from seqpipe_client import SeqpipeError  # noqa: E402

LONG = {"max_new_tokens": 12, "min_new_tokens": 12}  # every output 12 tokens long
SAMPLING = {"do_sample": True, "temperature": 2.0, "top_k": 0}


def post(port, body):
    """(status, JSON reply) of POST /v1/generate."""
    return post_json(port, "/v1/generate", body)


class GenerateOptionsTest(PipelineTestCase):
    PREFIX = "seqpipe-genopts-"

    @classmethod
    def settings(cls):
        cls.port = free_port()
        return ["gateway.metrics_port=0", "batcher.metrics_port=0",
                f"gateway.http_endpoint=127.0.0.1:{cls.port}", "batcher.max_queue_delay_us=2000",
                *TWO_OF_EACH]

    def sample(self, seed, text="teh speling"):
        return self.client.generate(text, seed=seed, **LONG, **SAMPLING)["text"]

    def test_a_seed_gives_the_same_text_every_time_and_every_way(self):
        first = self.sample(7)
        self.assertTrue(first)
        self.assertEqual(self.sample(7), first)
        # Among other requests, batched with them in the encoder and decoder.
        others = [self.client.submit(f"other text {i}", seed=100 + i, **LONG, **SAMPLING)
                  for i in range(6)]
        again = self.client.submit("teh speling", seed=7, **LONG, **SAMPLING)
        more = [self.client.submit("teh speling", **LONG, **SAMPLING) for _ in range(3)]  # unseeded
        for rid in others + more:
            self.assertEqual(self.client.result(rid)["status"], "ok")
        self.assertEqual(self.client.result(again)["text"], first)
        # A batch's texts with the same seed: each its own generator, so equal texts agree.
        both = self.client.generate(["teh speling", "teh speling"], seed=7, **LONG, **SAMPLING)
        self.assertEqual(both["texts"], [first, first])
        # HTTP JSON: the same request, the same text.
        status, reply = post(self.port, {"text": "teh speling",
                                         "params": {"seed": 7, **LONG, **SAMPLING}})
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["text"], first)
        # Other seeds draw other texts (the greedy text is not what sampling at 2.0 gives).
        self.assertNotEqual({self.sample(s) for s in (8, 9, 10)}, {first})
        greedy = self.client.generate("teh speling", **LONG)["text"]
        top1 = self.client.generate("teh speling", seed=3, do_sample=True, top_k=1, **LONG)["text"]
        self.assertEqual(top1, greedy)  # sampling from one token is greedy search

    def test_seqpipe_send_takes_every_option(self):
        def send(*args):
            out = subprocess.run([SEQPIPE, "send", "--endpoint", self.pipeline.endpoint, *args],
                                 capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            return out.stdout.splitlines()
        args = ["--max-new-tokens", "12", "--min-new-tokens", "12", "--do-sample", "--temperature",
                "2", "--top-k", "0", "--top-p", "0.95", "--seed", "11", "--repetition-penalty",
                "1.2", "--no-repeat-ngram-size", "2", "teh speling"]
        first = send(*args)
        self.assertEqual(send(*args)[0], first[0])
        self.assertEqual(first[0], self.client.generate(
            "teh speling", seed=11, top_p=0.95, repetition_penalty=1.2, no_repeat_ngram_size=2,
            **LONG, **SAMPLING)["text"])
        lines = send("--num-beams", "4", "--num-return-sequences", "3", "--max-new-tokens", "8",
                     "teh speling")
        self.assertEqual([line.split(":")[0] for line in lines[1:4]], ["  1", "  2", "  3"])
        self.assertIn("(score ", lines[1])

    def test_num_return_sequences_gives_the_hypotheses_with_their_scores(self):
        reply = self.client.generate(["teh speling", "hello world"], num_beams=4, return_scores=True,
                                     num_return_sequences=3, max_new_tokens=8)
        self.assertEqual(len(reply["sequences"]), 2)
        for text, score, hypotheses in zip(reply["texts"], reply["scores"], reply["sequences"]):
            self.assertEqual(len(hypotheses), 3)
            self.assertEqual(hypotheses[0]["text"], text)
            self.assertAlmostEqual(hypotheses[0]["score"], score, places=5)
            scores = [h["score"] for h in hypotheses]
            self.assertEqual(scores, sorted(scores, reverse=True))
        self.assertNotIn("sequences", self.client.generate("hello", num_beams=4, max_new_tokens=8))
        status, over_http = post(self.port, {"texts": ["teh speling", "hello world"], "params": {
            "num_beams": 4, "return_scores": True, "num_return_sequences": 3, "max_new_tokens": 8}})
        self.assertEqual(status, 200, over_http)
        self.assertEqual([[h["text"] for h in s] for s in over_http["sequences"]],
                         [[h["text"] for h in s] for s in reply["sequences"]])

    def test_stop_cuts_the_text_before_the_stop_sequence(self):
        full = self.client.generate("hello world", **LONG)["text"]
        self.assertGreaterEqual(len(full), 4, full)
        stop = full[2:4]
        want = full[:full.find(stop)]
        self.assertEqual(self.client.generate("hello world", stop=["\u00e9\u00e9", stop], **LONG)["text"],
                         want)
        status, reply = post(self.port, {"text": "hello world", "params": {"stop": [stop], **LONG}})
        self.assertEqual((status, reply["text"]), (200, want))
        self.assertEqual(self.client.generate("hello world", stop=["not in it \u2603"], **LONG)["text"],
                         full)

    def test_bad_values_are_invalid_argument_and_the_gateway_keeps_serving(self):
        bad = [({"top_p": 0}, "params.top_p must be in (0, 1]"),
               ({"top_p": 1.5}, "params.top_p must be in (0, 1]"),
               ({"temperature": 0}, "params.temperature must be > 0"),
               ({"num_beams": 2, "num_return_sequences": 3},
                "params.num_return_sequences (3) must not exceed params.num_beams (2)"),
               ({"num_beams": 2, "do_sample": True}, "params.do_sample needs params.num_beams 1"),
               ({"stop": ["x"] * 9}, "params.stop must be an array of at most 8 strings"),
               ({"seed": -1}, "params.seed must be an integer")]
        for params, message in bad:
            status, reply = post(self.port, {"text": "hello", "params": params})
            self.assertEqual((status, reply["error"]["code"]), (400, "invalid_argument"), params)
            self.assertIn(message, reply["error"]["message"])
            with self.assertRaises(SeqpipeError) as raised:
                self.client.generate("hello", **params)
            self.assertEqual(raised.exception.code, "invalid_argument")
            self.assertIn(message, raised.exception.message)
        with self.assertRaises(TypeError):
            self.client.generate("hello", temprature=0.5)
        self.assertEqual(self.client.generate("still serving", max_new_tokens=4)["status"], "ok")


if __name__ == "__main__":
    unittest.main(verbosity=2)
