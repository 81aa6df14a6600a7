"""The Python client's gateway failover over real sockets: test gateways are ROUTER sockets that
answer (or die, or stay silent) as the test says. And its generation options: every row of the
protocol's option table (seqpipe_options.py, written from it) goes on the wire by its name.

Environment: PYTHONPATH with clients/python.
"""
import os
import subprocess
import sys
import time
import unittest

import msgpack
import zmq

import seqpipe_client
from seqpipe_client import GENERATION_OPTIONS, Client
from seqpipe_options import OPTIONS

# A value of each option type that is not the option's default.
SAMPLES = {"integer": 2, "float or integer": 0.5, "boolean": True, "array of strings": ["a", "b"]}


class TestGateway:
    def __init__(self, context):
        self.sock = context.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def next_request(self, wait_ms):
        """(routing id, request id) of the next request within wait_ms, or None."""
        if not self.sock.poll(wait_ms):
            return None
        frames = self.sock.recv_multipart()
        return frames[0], msgpack.unpackb(frames[-1], raw=False)["id"]

    def answer(self, routing_id, request_id, text):
        self.sock.send_multipart([routing_id, b"", msgpack.packb(
            {"v": 1, "id": request_id, "status": "ok", "text": text,
             "timings_us": {"total": 1}})])


def wait_for(gateway, client, seconds=10):
    """Polls `gateway` while the client runs its retry machinery (a short result() wait)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            client.result("none", wait_ms=20)
        except Exception:  # noqa: BLE001  (unavailable: nothing for "none")
            pass
        got = gateway.next_request(0)
        if got:
            return got
    return None


class PythonClientFailoverTest(unittest.TestCase):
    def setUp(self):
        self.context = zmq.Context()
        self.gateways = []

    def tearDown(self):
        for g in self.gateways:
            g.sock.close()
        self.context.term()

    def gateway(self):
        self.gateways.append(TestGateway(self.context))
        return self.gateways[-1]

    def test_a_dead_gateways_request_moves_to_the_next_at_once_with_its_id(self):
        dies, live = self.gateway(), self.gateway()
        with Client([dies.endpoint, live.endpoint], retry_after_ms=60000) as client:
            request_id = client.submit("held", max_new_tokens=4)
            self.assertIsNotNone(dies.next_request(5000))
            dies.sock.close()
            moved = wait_for(live, client)
            self.assertIsNotNone(moved, "the request did not move to the live gateway")
            self.assertEqual(moved[1], request_id)
            live.answer(moved[0], request_id, "moved")
            self.assertEqual(client.result(request_id, wait_ms=5000)["text"], "moved")

    def test_a_silent_gateway_is_left_after_retry_after_and_a_second_reply_dropped(self):
        silent, live = self.gateway(), self.gateway()
        with Client(f"{silent.endpoint},{live.endpoint}", retry_after_ms=100) as client:
            request_id = client.submit("slow", max_new_tokens=4)
            first = silent.next_request(5000)
            retried = wait_for(live, client)
            self.assertEqual(retried[1], request_id)
            live.answer(retried[0], request_id, "live")
            silent.answer(first[0], request_id, "silent, after all")
            # Whichever arrives first is the answer; the other is dropped.
            self.assertIn(client.result(request_id, wait_ms=5000)["text"], ("live", "silent, after all"))
            # The late second reply is dropped, not returned for a later request.
            later = client.submit("next", max_new_tokens=4)
            got = live.next_request(5000)
            self.assertEqual(got[1], later, "new requests go to the gateway that answered")
            live.answer(got[0], later, "next")
            self.assertEqual(client.result(later, wait_ms=5000)["text"], "next")
            self.assertEqual(client.duplicates_dropped, 1)

    def test_partials_hold_a_streams_retry_off_until_its_gateway_falls_silent(self):
        streaming, other = self.gateway(), self.gateway()
        with Client([streaming.endpoint, other.endpoint], retry_after_ms=1000) as client:
            streamed = client.submit("teh speling", stream=True)
            rid, _ = streaming.next_request(5000)
            started = time.monotonic()
            k = 0
            while time.monotonic() - started < 1.5:  # partials for 1.5 retry_after
                streaming.sock.send_multipart([rid, b"", msgpack.packb(
                    {"v": 1, "id": streamed, "status": "partial", "text": f"{k} "})])
                self.assertEqual(client.result(streamed, wait_ms=5000)["status"], "partial")
                time.sleep(0.1)
                k += 1
            self.assertIsNone(other.next_request(0), "sent again while its partials came")
            moved = wait_for(other, client)  # silent now: it moves on after a retry_after
            self.assertIsNotNone(moved, "a silent stream was not sent again")
            self.assertEqual(moved[1], streamed)
            self.assertGreaterEqual(time.monotonic() - started, 2.0)

    def test_partials_keep_their_request_pending_and_come_in_order(self):
        gateway = self.gateway()
        with Client(gateway.endpoint, retry_after_ms=0) as client:
            streamed = client.submit("teh speling", stream=True)
            rid, _ = gateway.next_request(5000)
            other = client.submit("other")
            _, other_id = gateway.next_request(5000)
            for text in ["the ", "spelling"]:
                gateway.sock.send_multipart([rid, b"", msgpack.packb(
                    {"v": 1, "id": streamed, "status": "partial", "text": text})])
            gateway.answer(rid, other_id, "other")  # another request's reply in between
            gateway.answer(rid, streamed, "the spelling")
            # Awaiting the other request first keeps the partials for their own result() calls.
            self.assertEqual(client.result(other, wait_ms=5000)["text"], "other")
            got = [client.result(streamed, wait_ms=5000) for _ in range(3)]
            self.assertEqual([r["status"] for r in got], ["partial", "partial", "ok"])
            self.assertEqual("".join(r["text"] for r in got[:2]), got[2]["text"])
            self.assertEqual(client.duplicates_dropped, 0)


class PythonClientOptionsTest(unittest.TestCase):
    def test_every_row_of_the_option_table_reaches_the_wire(self):
        context = zmq.Context()
        gateway = TestGateway(context)
        try:
            with Client(gateway.endpoint) as client:
                for option in OPTIONS:
                    sample = SAMPLES[option.type]
                    # A list option also takes any iterable of strings.
                    given = tuple(sample) if isinstance(sample, list) else sample
                    client.submit("x", **{option.name: given})
                    self.assertTrue(gateway.sock.poll(5000), option.name)
                    request = msgpack.unpackb(gateway.sock.recv_multipart()[-1], raw=False)
                    self.assertEqual(request["params"][option.name], sample, option.name)
                with self.assertRaises(TypeError):
                    client.submit("x", temprature=0.5)
            self.assertIn("stop", GENERATION_OPTIONS)
            self.assertNotIn("num_beams", GENERATION_OPTIONS)  # a keyword of submit() itself
        finally:
            gateway.sock.close()
            context.term()


class PythonClientWithoutItsModulesTest(unittest.TestCase):
    def test_a_python_lacking_its_modules_says_what_is_missing_and_where_to_get_it(self):
        # -S: without site-packages, this python3 has neither zmq nor msgpack (a pyenv or venv
        # python3 without Debian's packages).
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(seqpipe_client.__file__)))
        done = subprocess.run([sys.executable, "-S", "-c", "import seqpipe_client"], env=env,
                              capture_output=True, text=True, timeout=60)
        self.assertNotEqual(done.returncode, 0)
        last = done.stderr.strip().split("\n")[-1]
        self.assertTrue(last.startswith("ModuleNotFoundError: seqpipe_client needs"), last)
        self.assertRegex(last, r"has no '(msgpack|zmq)'")
        for said in (sys.executable, "apt-get install python3-zmq python3-msgpack",
                     "pip install pyzmq msgpack"):
            self.assertIn(said, last)


if __name__ == "__main__":
    unittest.main(verbosity=2)
