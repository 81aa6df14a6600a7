"""Python client of a seqpipe gateway (protocol v1, docs/PROTOCOL.md).

Uses Debian's python3-zmq and python3-msgpack:

    from seqpipe_client import Client
    with Client("tcp://127.0.0.1:5555") as c:
        reply = c.generate("teh speling", max_new_tokens=16)
        print(reply["text"], reply["timings_us"]["total"])

        request_id = c.submit("a long text", max_new_tokens=64)   # in flight, not waited for
        c.cancel(request_id)                                       # answered `cancelled` (or ok if done)
        reply = c.result(request_id)                               # the reply map, error or not
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

    def generate(self, text_or_texts, max_new_tokens=None, num_beams=1, length_penalty=1.0,
                 min_new_tokens=0, return_scores=False, timeout_ms=None, priority=None):
        """One request; returns the reply map, or raises SeqpipeError for an error reply.
        max_new_tokens: None = the server's default (docs/PROTOCOL.md).
        priority: 1 (highest) .. the server's batcher.priority_levels; None = the server's default."""
        request_id = self.submit(text_or_texts, max_new_tokens, num_beams, length_penalty, min_new_tokens,
                                 return_scores, timeout_ms, priority)
        reply = self.result(request_id, (timeout_ms or self._timeout_ms) + 1000)
        if reply.get("status") != "ok":
            error = reply.get("error", {})
            raise SeqpipeError(error.get("code", "internal"), error.get("message", ""))
        return reply

    def submit(self, text_or_texts, max_new_tokens=None, num_beams=1, length_penalty=1.0,
               min_new_tokens=0, return_scores=False, timeout_ms=None, priority=None):
        """Sends one request without waiting; returns its id (for result() and cancel())."""
        request_id = f"py{next(self._ids)}"
        request = {"v": PROTOCOL_VERSION, "id": request_id}
        if isinstance(text_or_texts, str):
            request["text"] = text_or_texts
        else:
            request["texts"] = list(text_or_texts)
        request["params"] = {
            "num_beams": int(num_beams),
            "length_penalty": float(length_penalty),
            "min_new_tokens": int(min_new_tokens),
            "return_scores": bool(return_scores),
        }
        if max_new_tokens is not None:
            request["params"]["max_new_tokens"] = int(max_new_tokens)
        if priority is not None:
            request["params"]["priority"] = int(priority)
        if timeout_ms is not None:
            request["timeout_ms"] = int(timeout_ms)
        self._socket.send_multipart([b"", msgpack.packb(request, use_single_float=True)])
        return request_id

    def cancel(self, request_id):
        """Cancels an in-flight request of this client. Its reply (from result()) is then the error
        `cancelled`, or its normal reply if it finished first. The cancel has no reply of its own."""
        self._socket.send_multipart([b"", msgpack.packb({"v": PROTOCOL_VERSION, "op": "cancel", "id": request_id})])

    def result(self, request_id, wait_ms=None):
        """Waits for the reply to `request_id` and returns the reply map (ok or error); replies to
        other ids arriving meanwhile are dropped. Raises SeqpipeError("unavailable") on no reply."""
        return self._receive(request_id, wait_ms)

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
