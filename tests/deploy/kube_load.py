"""Load for the container tests (tests/deploy/podman_test.py, compose_up_test.py), run inside a
network namespace that reaches the gateway on 127.0.0.1:5555 (nsenter): COUNT requests at RATE/s
from one DEALER (tests/e2e/faults' Load), CurveZMQ with the gateways' public certificate file and
this client's certificate NAME when given (as `seqpipe keygen` writes them); prints the figures,
then one JSON line: sent, ok, lost, twice, p99_ms.
    python3 kube_load.py COUNT RATE [SERVER_KEY CLIENT_KEY]"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
sys.path.insert(0, os.path.join(HERE, "..", "e2e", "faults"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
os.environ.setdefault("SEQPIPE_BIN", "seqpipe")  # (harness.py reads them; unused here)
os.environ.setdefault("SEQPIPE_MKMODEL", "seqpipe-mkmodel")
from faults_test import Load  # noqa: E402
from seqpipe_client import _curve_keys  # noqa: E402

count, rate = int(sys.argv[1]), float(sys.argv[2])
curve = _curve_keys(sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else None
load = Load("tcp://127.0.0.1:5555", count, rate, curve=curve)
load._run()
first = {rid: answers[0] for rid, answers in load.replies.items()}
ok = sorted(t - load.sent[rid] for rid, (status, _, t) in first.items() if status == "ok")
print(load.figures(), flush=True)
print(json.dumps({"sent": len(load.sent), "ok": len(ok),
                  "lost": sum(1 for rid in load.sent if rid not in load.replies),
                  "twice": sum(1 for a in load.replies.values() if len(a) > 1),
                  "p99_ms": ok[min(len(ok) - 1, int(0.99 * len(ok)))] * 1000 if ok else None}))
