"""deploy/k8s under `podman kube play`, for real: the podman overlay of the same base, run with this
checkout's image, on an internal podman network this test creates. Every process becomes ready
(/ready, asked inside its pod's network namespace), the pipeline answers, and under load one
decoder pod is stopped (SIGTERM: it drains) and another one added (20 requests/s): 0 requests lost
(engines.check_load).

The image is named by its content (deploy/image/build.sh --print-content-tag: a hash of the
binaries of SEQPIPE_BUILD_DIR, the model and the image's inputs): built by deploy/image/build.sh
when no image has that tag (minutes; needs the Debian mirror), reused when one does, so an image
of other binaries is never tested. Older content-tagged images are removed.

Needs root, podman, runc, mmdebstrap (scripts/debian-packages.txt), kubectl, nsenter and curl;
prints "SKIP: <why>" (exit 77) without them. Run by hand (docs/DEPLOY.md):
    SEQPIPE_BUILD_DIR=build/release python3 tests/deploy/podman_test.py
"""
import os
import subprocess
import sys
import time
import unittest

from engines import HERE, ROOT, SKIP, check_load, missing, run, this_checkouts_image

NETWORK = f"seqpipe-kube-test-{os.getpid()}"
METRICS = {"gateway": 9100, "batcher": 9101, "tokenizer": 9110, "encoder": 9120, "decoder": 9130,
           "postprocessor": 9140}


def pid_of(pod):
    infra = run("podman", "pod", "inspect", pod, "--format", "{{.InfraContainerID}}").stdout.strip()
    return run("podman", "inspect", infra, "--format", "{{.State.Pid}}").stdout.strip()


def in_pod(pod, *args, timeout=120):
    return run("nsenter", f"--net=/proc/{pid_of(pod)}/ns/net", *args, check=False, timeout=timeout)


class PodmanKubeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        image = this_checkouts_image()
        cls.work = run("mktemp", "-d").stdout.strip()
        cls.yaml = os.path.join(cls.work, "seqpipe.yaml")
        rendered = run("kubectl", "kustomize", os.path.join(ROOT, "deploy/k8s/overlays/podman")).stdout
        named = "image: localhost/seqpipe:latest\n"  # the base's kustomization names it
        assert rendered.count(named) == 6, "not the base's image in each Deployment"
        with open(cls.yaml, "w") as f:
            f.write(rendered.replace(named, f"image: {image}\n"))
        run("podman", "network", "create", "--internal", NETWORK)
        cls.played = [cls.yaml]
        try:
            run("podman", "kube", "play", "--network", NETWORK, cls.yaml, timeout=300)
        except subprocess.CalledProcessError as e:
            cls.tearDownClass()
            raise RuntimeError(f"podman kube play failed: {e.stderr}") from e

    @classmethod
    def tearDownClass(cls):
        for played in reversed(cls.played):
            run("podman", "kube", "down", played, check=False, timeout=120)
        run("podman", "network", "rm", "-f", NETWORK, check=False)
        run("rm", "-rf", cls.work)

    def wait_ready(self, pod, port, within_s=120):
        deadline = time.monotonic() + within_s
        answer = None
        while time.monotonic() < deadline:
            answer = in_pod(pod, "curl", "-s", f"http://127.0.0.1:{port}/ready", timeout=10).stdout
            if answer == "ready\n":
                return
            time.sleep(0.5)
        self.fail(f"{pod}: /ready answered {answer!r} after {within_s} s")

    def test_ready_answers_and_a_decoder_replaced_under_load_loses_nothing(self):
        started = time.monotonic()
        for stage, port in METRICS.items():
            self.wait_ready(f"seqpipe-{stage}-pod-0", port)
        print(f"\nevery pod ready {time.monotonic() - started:.1f} s after play", flush=True)
        # Each pod's /ready says it is bound or connected, not that the pipeline answers end to end
        # (a worker's connection may still be in its handshake): the first answer gets three tries
        # of one 6 s request each, and the test says how many it took.
        for attempt in range(1, 4):
            first = in_pod("seqpipe-gateway-pod-0", "/usr/bin/python3", os.path.join(HERE, "kube_load.py"), "1", "1")
            if '"ok": 1' in first.stdout:
                break
        print(f"first answer on try {attempt} ({time.monotonic() - started:.1f} s after play)", flush=True)
        self.assertIn('"ok": 1', first.stdout, first.stdout + first.stderr)

        # A second decoder (the same Deployment, renamed), then the first one stopped, under load.
        second = os.path.join(self.work, "decoder-2.yaml")
        with open(self.yaml) as f:
            docs = f.read().split("\n---\n")
        decoder = next(d for d in docs if "name: seqpipe-decoder\n" in d and "kind: Deployment" in d)
        config = next(d for d in docs if "kind: ConfigMap" in d and "name: seqpipe-config" in d)
        with open(second, "w") as f:
            f.write(config + "\n---\n" + decoder.replace("name: seqpipe-decoder\n", "name: seqpipe-decoder-2\n", 1)
                    .replace("replicas: 2\n", "replicas: 1\n", 1))
        load = subprocess.Popen(["nsenter", f"--net=/proc/{pid_of('seqpipe-gateway-pod-0')}/ns/net",
                                 "/usr/bin/python3", os.path.join(HERE, "kube_load.py"), "600", "20"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(2)
        self.played.append(second)
        added = run("podman", "kube", "play", "--network", NETWORK, second, check=False, timeout=300)
        self.assertEqual(added.returncode, 0, added.stderr)
        self.wait_ready("seqpipe-decoder-2-pod-0", METRICS["decoder"])
        run("podman", "pod", "stop", "-t", "30", "seqpipe-decoder-pod-0", timeout=60)
        out, _ = load.communicate(timeout=120)
        print(out, flush=True)
        check_load(self, out)

if __name__ == "__main__":
    why = missing(("podman", "runc", "mmdebstrap", "kubectl", "nsenter", "curl"))
    if why:
        print(f"SKIP: {why}")
        sys.exit(SKIP)
    unittest.main(verbosity=2)
