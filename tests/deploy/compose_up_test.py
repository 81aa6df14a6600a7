"""deploy/compose/compose.yaml started for real: Debian's docker-compose on Debian's dockerd, the
engine in a network namespace this test makes (so the published port 5555 is on that
namespace's interfaces, not the host's), this checkout's image (engines.this_checkouts_image,
copied from podman and tagged seqpipe:latest, the name the compose file uses), CurveZMQ keys
made by `seqpipe keygen` as docs/DEPLOY.md says. The file is used as it is; only the Prometheus
service is left out (its image is on a registry, and these machines reach none). Every stage
becomes live (`seqpipe status`, the gateway's healthcheck), a request is answered in the
gateway's container, and a load sent to the published port from the namespace (20 requests/s)
loses nothing (engines.check_load).

Needs root, podman, runc, mmdebstrap, dockerd and docker-compose (scripts/debian-packages.txt);
prints "SKIP: <why>" (exit 77) without them. By hand:
    SEQPIPE_BUILD_DIR=build/release python3 tests/deploy/compose_up_test.py
"""
import os
import shutil
import sys
import tempfile
import time
import unittest

from engines import (HERE, ROOT, SKIP, Dockerd, check_load, make_keys, make_netns, missing, remove_netns,
                     run, save_image, sweep_stale, this_checkouts_image)

NETNS = f"seqpipe-compose-{os.getpid()}"
PROJECT = "seqpipe-compose-test"
COMPOSE = os.path.join(ROOT, "deploy/compose/compose.yaml")
SEQPIPE_SERVICES = ["gateway", "batcher", "tokenizer", "encoder", "decoder", "postprocessor"]
CONFIG = "/etc/seqpipe/pipeline.yaml"  # where compose.yaml mounts config/compose.yaml


class ComposeUpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sweep_stale()
        image = this_checkouts_image()
        cls.keys = tempfile.mkdtemp(prefix="seqpipe-compose-keys-")
        cls.engine = None
        make_netns(NETNS)
        try:
            make_keys(cls.keys)
            cls.engine = Dockerd(NETNS).start()
            archive = os.path.join(cls.keys, "image.tar")
            save_image(image, archive)
            cls.engine.load(archive, image, "seqpipe:latest")
            os.remove(archive)
            cls.compose("up", "-d", "--no-build", *SEQPIPE_SERVICES, timeout=300)
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def compose(cls, *args, check=True, timeout=120):
        env = dict(cls.engine.env, SEQPIPE_KEYS=cls.keys)
        return run("docker-compose", "-p", PROJECT, "-f", COMPOSE, *args, check=check, timeout=timeout,
                   env=env)

    @classmethod
    def tearDownClass(cls):
        if cls.engine is not None:
            cls.compose("down", "--timeout", "30", check=False, timeout=180)
            cls.engine.stop()
        remove_netns(NETNS)
        shutil.rmtree(cls.keys, ignore_errors=True)

    def in_gateway(self, *args, timeout=30):
        return self.compose("exec", "-T", "gateway", *args, check=False, timeout=timeout)

    def test_every_stage_live_answers_and_a_load_loses_nothing(self):
        started, deadline = time.monotonic(), time.monotonic() + 180
        status = None
        while time.monotonic() < deadline:
            status = self.in_gateway("seqpipe", "status", "--config", CONFIG)
            if status.returncode == 0:
                break
            time.sleep(1)
        logs = "" if status.returncode == 0 else self.compose("logs", check=False).stdout[-4000:]
        self.assertEqual(status.returncode, 0, status.stdout + status.stderr + logs)
        print(f"\nevery stage live {time.monotonic() - started:.1f} s after up", flush=True)
        ps = self.engine.docker("ps", "--format", "{{.Names}}").stdout.split()
        print("containers:", " ".join(sorted(ps)), flush=True)
        for service in SEQPIPE_SERVICES:
            self.assertTrue(any(f"_{service}_" in name for name in ps), f"no {service} container: {ps}")

        answer = self.in_gateway("seqpipe", "send", "--config", CONFIG, "teh speling")
        self.assertEqual(answer.returncode, 0, answer.stdout + answer.stderr)
        self.assertTrue(answer.stdout.strip(), "an empty answer")

        load = run("nsenter", f"--net=/run/netns/{NETNS}", "/usr/bin/python3",
                   os.path.join(HERE, "kube_load.py"), "400", "20", os.path.join(self.keys, "hub"),
                   os.path.join(self.keys, "me"), check=False, timeout=120)
        print(load.stdout, load.stderr, flush=True)
        check_load(self, load.stdout)

if __name__ == "__main__":
    why = missing(("podman", "runc", "mmdebstrap", "dockerd", "docker-compose", "nsenter"))
    if why:
        print(f"SKIP: {why}")
        sys.exit(SKIP)
    unittest.main(verbosity=2)
