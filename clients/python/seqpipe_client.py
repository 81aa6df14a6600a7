"""Python client of a seqpipe gateway (protocol v1, docs/PROTOCOL.md).

Uses Debian's python3-zmq and python3-msgpack:

    from seqpipe_client import Client
    with Client("tcp://127.0.0.1:5555") as c:
        reply = c.generate("teh speling", max_new_tokens=16)
        print(reply["text"], reply["timings_us"]["total"])
        print(reply["usage"][0])  # {"prompt_tokens", "completion_tokens", "finish_reason"}
        reply = c.generate("hello", do_sample=True, top_p=0.9, seed=7, stop=["."])  # HF's options
        reply = c.generate("hello", num_beams=4, num_return_sequences=2)   # reply["sequences"]

        request_id = c.submit("a long text", max_new_tokens=64)   # in flight, not waited for
        c.cancel(request_id)                                       # answered `cancelled` (or ok if done)
        reply = c.result(request_id)                               # the reply map, error or not
"""
import itertools
import os
import sys
import time

try:
    import msgpack
    import zmq
    import zmq.auth
    from zmq.utils.monitor import recv_monitor_message
except ModuleNotFoundError as missing:
    # A python3 other than Debian's (pyenv's, a venv) lacks Debian's packages: say which it is,
    # what it lacks and where to get it, instead of a bare "No module named 'zmq'".
    raise ModuleNotFoundError(
        f"seqpipe_client needs the modules zmq and msgpack; {sys.executable} has no "
        f"{missing.name!r}. On Debian: apt-get install python3-zmq python3-msgpack and run "
        "/usr/bin/python3; in another Python (a venv, pyenv): pip install pyzmq msgpack",
        name=missing.name) from None

from seqpipe_options import OPTIONS

PROTOCOL_VERSION = 1
# The generation params submit() names as keywords of its own; it takes every other row of the
# protocol's option table (seqpipe_options.py, written from it) by name: GENERATION_OPTIONS.
_KEYWORD_PARAMS = ("max_new_tokens", "num_beams", "length_penalty", "min_new_tokens",
                   "return_scores", "priority")
GENERATION_OPTIONS = tuple(o.name for o in OPTIONS if o.name not in _KEYWORD_PARAMS)
# Options whose value is a list (stop): any iterable of strings goes as a list.
_LIST_OPTIONS = frozenset(o.name for o in OPTIONS if o.type == "array of strings")


class SeqpipeError(Exception):
    """An error reply from the gateway, or no reply in time (code "unavailable")."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _curve_keys(server_key, client_key):
    """(the gateways' public key, this client's public and secret keys), or None for plain text."""
    if server_key is None and client_key is None:
        return None
    if server_key is None or client_key is None:
        raise ValueError("server_key and client_key go together (CurveZMQ needs both)")
    secret_file = client_key + "_secret"
    if os.stat(secret_file).st_mode & 0o077:
        raise ValueError(f"{secret_file}: a secret key file must not be readable by group or "
                         "others (chmod 600 it)")
    server_public, _ = zmq.auth.load_certificate(server_key)
    public, secret = zmq.auth.load_certificate(secret_file)
    if secret is None:
        raise ValueError(f"{secret_file}: no secret key in it")
    return server_public, public, secret


class Client:
    """A DEALER per gateway. `endpoint`: one endpoint, a comma-separated list, or a list.

    A gateway that dies loses nothing (the ZeroMQ guide's Lazy Pirate and Freelance patterns):
    when its connection drops (seen at once by a socket monitor), the requests it held are sent
    again, with the same id, to the next gateway (with only one, to it again: delivered once it is
    back); a request unanswered for `retry_after_ms` (a hung gateway keeps its connection) moves on
    the same way (a streamed request's partials count as replies: each starts the wait anew); 0
    turns that timer off. At most `max_attempts` sends per request, none past its
    timeout_ms. The first reply to an id is the answer; a second is dropped (duplicates_dropped).

    CurveZMQ (a gateway with security.server_key, docs/DEPLOY.md): `server_key` is the gateways'
    public certificate file and `client_key` this client's certificate NAME (its key pair is read
    from NAME_secret), as `seqpipe keygen` writes them; the gateway serves the client only if its
    public key is in the gateway's allow list.
    """

    def __init__(self, endpoint, timeout_ms=10000, retry_after_ms=5000, max_attempts=3,
                 server_key=None, client_key=None):
        curve = _curve_keys(server_key, client_key)
        endpoints = endpoint.split(",") if isinstance(endpoint, str) else list(endpoint)
        endpoints = [e for e in endpoints if e]
        if not endpoints:
            raise ValueError("no gateway endpoint given")
        self._context = zmq.Context.instance()
        self._sockets, self._monitors, self._connected = [], [], []
        self._poller = zmq.Poller()
        for e in endpoints:
            sock = self._context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            if curve:
                sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = curve
            monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
            sock.connect(e)
            self._sockets.append(sock)
            self._monitors.append(monitor)
            self._connected.append(False)
            self._poller.register(sock, zmq.POLLIN)
            self._poller.register(monitor, zmq.POLLIN)
        self._current = 0  # the gateway new requests go to
        self._pending = {}  # id -> [payload, gateway, attempts, deadline or None, retry_at or None]
        self._answered = {}  # replies that came while another id was awaited
        self._timeout_ms = timeout_ms
        self._retry_after_s = retry_after_ms / 1000.0
        self._max_attempts = max_attempts
        self._ids = itertools.count(1)
        self.duplicates_dropped = 0
        self._partials = {}  # id -> partial replies not yet taken by result(), in order

    def _send(self, g, payload):
        """Never blocks: a gateway that refused this client's key leaves its socket without a
        connection, where a send would wait forever. Unsent, a request is answered "unavailable"
        when its wait is over (or sent again by a retry)."""
        try:
            self._sockets[g].send_multipart([b"", payload], flags=zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def close(self):
        for sock in self._sockets:
            sock.disable_monitor()
            sock.close()
        for monitor in self._monitors:
            monitor.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call_raw(self, payload, wait_ms=None):
        """Sends raw bytes as a request; returns the decoded reply map (tests of bad input)."""
        self._send(self._current, payload)
        return self._receive(None, wait_ms)

    def generate(self, text_or_texts, max_new_tokens=None, num_beams=1, length_penalty=1.0,
                 min_new_tokens=0, return_scores=False, timeout_ms=None, priority=None, **options):
        """One request; returns the reply map, or raises SeqpipeError for an error reply.
        max_new_tokens: None = the server's default (docs/PROTOCOL.md).
        priority: 1 (highest) .. the server's batcher.priority_levels; None = the server's default.
        options: HF generate()'s options by their protocol names (GENERATION_OPTIONS), e.g.
        do_sample=True, top_p=0.9, seed=7, stop=["."], num_return_sequences=2 (the reply's
        "sequences"); the server checks their values. model, version: as submit()."""
        request_id = self.submit(text_or_texts, max_new_tokens, num_beams, length_penalty, min_new_tokens,
                                 return_scores, timeout_ms, priority, **options)
        reply = self.result(request_id, (timeout_ms or self._timeout_ms) + 1000)
        if reply.get("status") != "ok":
            error = reply.get("error", {})
            raise SeqpipeError(error.get("code", "internal"), error.get("message", ""))
        return reply

    def stream(self, text, timeout_ms=None, **kwargs):
        """One streamed request (docs/PROTOCOL.md, "Streaming"): yields each partial reply map as
        it comes (its "text" is what it adds to the text so far), then the final reply map; raises
        SeqpipeError for an error reply. kwargs: as submit()."""
        request_id = self.submit(text, timeout_ms=timeout_ms, stream=True, **kwargs)
        wait_ms = (timeout_ms or self._timeout_ms) + 1000
        while True:
            reply = self.result(request_id, wait_ms)
            if reply.get("status") == "error":
                error = reply.get("error", {})
                raise SeqpipeError(error.get("code", "internal"), error.get("message", ""))
            yield reply
            if reply.get("status") != "partial":
                return

    def submit(self, text_or_texts, max_new_tokens=None, num_beams=1, length_penalty=1.0,
               min_new_tokens=0, return_scores=False, timeout_ms=None, priority=None, stream=False,
               model=None, version=None, **options):
        """Sends one request without waiting; returns its id (for result() and cancel()).
        stream: partial replies come first; result() returns them one by one, then the final.
        model, version: which of the server's models runs it (None: its default model, and the
        model's highest version); one it does not serve is answered not_found."""
        unknown = sorted(set(options) - set(GENERATION_OPTIONS))
        if unknown:
            raise TypeError(f"unknown generation option(s): {', '.join(unknown)}")
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
        for name, value in options.items():  # as given: the server checks the values
            request["params"][name] = list(value) if name in _LIST_OPTIONS else value
        if timeout_ms is not None:
            request["timeout_ms"] = int(timeout_ms)
        if stream:
            request["stream"] = True
        if model is not None:
            request["model"] = str(model)
        if version is not None:
            request["version"] = int(version)
        payload = msgpack.packb(request, use_single_float=True)
        self._send(self._current, payload)
        now = time.monotonic()
        self._pending[request_id] = [payload, self._current, 1,
                                     None if timeout_ms is None else now + timeout_ms / 1000.0,
                                     now + self._retry_after_s if self._retry_after_s > 0 else None]
        return request_id

    def cancel(self, request_id):
        """Cancels an in-flight request of this client. Its reply (from result()) is then the error
        `cancelled`, or its normal reply if it finished first. The cancel has no reply of its own."""
        payload = msgpack.packb({"v": PROTOCOL_VERSION, "op": "cancel", "id": request_id})
        entry = self._pending.get(request_id)
        last, sent = (entry[1], entry[2]) if entry else (self._current, 1)
        n = len(self._sockets)
        for k in range(min(sent, n)):  # every gateway a retried request may sit at
            self._send((last - k) % n, payload)

    def result(self, request_id, wait_ms=None):
        """Waits for the reply to `request_id` and returns the reply map (ok or error); replies to
        other ids arriving meanwhile are dropped. Raises SeqpipeError("unavailable") on no reply."""
        return self._receive(request_id, wait_ms)

    def _receive(self, request_id, wait_ms):
        wait_ms = self._timeout_ms if wait_ms is None else wait_ms
        until = time.monotonic() + wait_ms / 1000.0
        if self._partials.get(request_id):
            return self._partials[request_id].pop(0)
        if request_id in self._answered:
            return self._answered.pop(request_id)
        while True:
            now = time.monotonic()
            self._retry_due(now)
            wake = min([until] + [p[4] for p in self._pending.values() if p[4] is not None])
            events = dict(self._poller.poll(max(0, int((wake - now) * 1000))))
            for g, monitor in enumerate(self._monitors):
                if monitor in events:
                    self._on_monitor_event(g, recv_monitor_message(monitor)["event"])
            for sock in self._sockets:
                if sock not in events:
                    continue
                reply = msgpack.unpackb(sock.recv_multipart()[-1], raw=False)
                rid = reply.get("id", "")
                if reply.get("status") == "partial":  # the request stays pending
                    self._heard_of(rid)
                    if rid == request_id:
                        return reply
                    if rid in self._pending:
                        self._partials.setdefault(rid, []).append(reply)
                    continue
                self._partials.pop(rid, None)
                if rid and self._pending.pop(rid, None) is None and request_id is not None:
                    self.duplicates_dropped += 1  # answered already, or a late reply to a call given up
                    continue
                if request_id is None or rid == request_id:
                    return reply
                if rid:
                    self._answered[rid] = reply  # another request's: kept for its result()
            if time.monotonic() >= until:
                if request_id is not None:
                    self._pending.pop(request_id, None)  # given up: a later reply is dropped
                raise SeqpipeError("unavailable", "no reply from the gateway in time")

    def _next_gateway(self, g):
        n = len(self._sockets)
        return next(((g + k) % n for k in range(1, n + 1) if self._connected[(g + k) % n]), (g + 1) % n)

    def _resend(self, request_id, entry, now):
        payload, gateway, attempts, deadline, _ = entry
        if attempts >= self._max_attempts or (deadline is not None and now >= deadline):
            entry[4] = None
            return
        if gateway == self._current:
            self._current = self._next_gateway(gateway)
        entry[1], entry[2] = self._current, attempts + 1
        entry[4] = now + self._retry_after_s if self._retry_after_s > 0 else None
        self._send(self._current, payload)

    def _heard_of(self, request_id):
        """A partial shows its gateway at work on the request: its retry waits a retry_after
        from now (sent again elsewhere, a stream would start over)."""
        entry = self._pending.get(request_id)
        if entry is not None and entry[4] is not None:
            entry[4] = time.monotonic() + self._retry_after_s

    def _retry_due(self, now):
        for request_id, entry in list(self._pending.items()):
            if entry[4] is not None and entry[4] <= now:
                self._resend(request_id, entry, now)

    def _on_monitor_event(self, g, event):
        if event == zmq.EVENT_CONNECTED:
            self._connected[g] = True
        elif event == zmq.EVENT_DISCONNECTED:
            self._connected[g] = False
            now = time.monotonic()
            for request_id, entry in list(self._pending.items()):
                if entry[1] == g:
                    self._resend(request_id, entry, now)
            if self._current == g:
                self._current = self._next_gateway(g)
