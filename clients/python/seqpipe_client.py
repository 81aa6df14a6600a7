"""Python client of a seqpipe gateway (protocol v1, docs/PROTOCOL.md).

Uses Debian's python3-zmq and python3-msgpack:

    from seqpipe_client import Client
    with Client("tcp://127.0.0.1:5555") as c:
        reply = c.generate("teh speling", max_new_tokens=16)
        print(reply["text"], reply["timings_us"]["total"])
"""
import itertools

import msgpack
import zmq

PROTOCOL_VERSION = 1


class SeqpipeError(Exception):
    """An error reply from the gateway, or no reply in time (code "unavailable")."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Client:
    def __init__(self, endpoint, timeout_ms=10000):
        self._context = zmq.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(endpoint)
        self._timeout_ms = timeout_ms
        self._ids = itertools.count(1)

    def close(self):
        self._socket.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call_raw(self, payload, wait_ms=None):
        """Sends raw bytes as a request; returns the decoded reply map (tests of bad input)."""
        self._socket.send_multipart([b"", payload])
        return self._receive(None, wait_ms)

    def generate(self, text_or_texts, max_new_tokens=32, num_beams=1, length_penalty=1.0,
                 min_new_tokens=0, return_scores=False, timeout_ms=None):
        """One request; returns the reply map, or raises SeqpipeError for an error reply."""
        request_id = f"py{next(self._ids)}"
        request = {"v": PROTOCOL_VERSION, "id": request_id}
        if isinstance(text_or_texts, str):
            request["text"] = text_or_texts
        else:
            request["texts"] = list(text_or_texts)
        request["params"] = {
            "max_new_tokens": int(max_new_tokens),
            "num_beams": int(num_beams),
            "length_penalty": float(length_penalty),
            "min_new_tokens": int(min_new_tokens),
            "return_scores": bool(return_scores),
        }
        if timeout_ms is not None:
            request["timeout_ms"] = int(timeout_ms)
        self._socket.send_multipart([b"", msgpack.packb(request, use_single_float=True)])
        reply = self._receive(request_id, (timeout_ms or self._timeout_ms) + 1000)
        if reply.get("status") != "ok":
            error = reply.get("error", {})
            raise SeqpipeError(error.get("code", "internal"), error.get("message", ""))
        return reply

    def _receive(self, request_id, wait_ms):
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        wait_ms = self._timeout_ms if wait_ms is None else wait_ms
        while True:
            if not poller.poll(wait_ms):
                raise SeqpipeError("unavailable", "no reply from the gateway in time")
            frames = self._socket.recv_multipart()
            reply = msgpack.unpackb(frames[-1], raw=False)
            if request_id is None or reply.get("id") == request_id:
                return reply  # else a late reply to an earlier call: skip it
