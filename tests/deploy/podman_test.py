"""deploy/k8s under `podman kube play`, for real: the podman overlay of the same base, the image of
deploy/image/build.sh, the pods on an internal podman network this test creates. Every process
becomes ready (/ready, asked inside its pod's network namespace), the pipeline answers, and
under load one decoder pod is stopped (SIGTERM: it drains) and another one added: 0 requests lost.

Needs root, podman, kubectl, nsenter, curl and the image localhost/seqpipe:latest (built by
deploy/image/build.sh), and SEQPIPE_IMAGE_TESTS=1 to say that image is this checkout's; prints
"SKIP: <why>" without them. Run by hand (docs/DEPLOY.md):
    deploy/image/build.sh && SEQPIPE_IMAGE_TESTS=1 python3 tests/deploy/podman_test.py
"""
import json
import os
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
IMAGE = "localhost/seqpipe:latest"
NETWORK = f"seqpipe-kube-test-{os.getpid()}"
METRICS = {"gateway": 9100, "batcher": 9101, "tokenizer": 9110, "encoder": 9120, "decoder": 9130,
           "postprocessor": 9140}


def run(*args, check=True, timeout=120):
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=timeout)


def missing():
    # An image left by an earlier build would test other binaries than this checkout's.
    if os.environ.get("SEQPIPE_IMAGE_TESTS") != "1":
        return ("set SEQPIPE_IMAGE_TESTS=1 once deploy/image/build.sh has built this checkout's "
                "image")
    if os.geteuid() != 0:
        return "needs root (nsenter into the pods' network namespaces)"
    for tool in ("podman", "kubectl", "nsenter", "curl"):
        if run("sh", "-c", f"command -v {tool}", check=False).returncode != 0:
            return f"{tool} is not installed"
    if run("podman", "image", "exists", IMAGE, check=False).returncode != 0:
        return f"no image {IMAGE}: build it with deploy/image/build.sh"
    return None


def pid_of(pod):
    infra = run("podman", "pod", "inspect", pod, "--format", "{{.InfraContainerID}}").stdout.strip()
    return run("podman", "inspect", infra, "--format", "{{.State.Pid}}").stdout.strip()


def in_pod(pod, *args, timeout=120):
    return run("nsenter", f"--net=/proc/{pid_of(pod)}/ns/net", *args, check=False, timeout=timeout)


class PodmanKubeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = run("mktemp", "-d").stdout.strip()
        cls.yaml = os.path.join(cls.work, "seqpipe.yaml")
        with open(cls.yaml, "w") as f:
            f.write(run("kubectl", "kustomize", os.path.join(ROOT, "deploy/k8s/overlays/podman")).stdout)
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
        first = in_pod("seqpipe-gateway-pod-0", "/usr/bin/python3", os.path.join(HERE, "kube_load.py"), "1", "1")
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
                                 "/usr/bin/python3", os.path.join(HERE, "kube_load.py"), "600", "40"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(2)
        self.played.append(second)
        added = run("podman", "kube", "play", "--network", NETWORK, second, check=False, timeout=300)
        self.assertEqual(added.returncode, 0, added.stderr)
        self.wait_ready("seqpipe-decoder-2-pod-0", METRICS["decoder"])
        run("podman", "pod", "stop", "-t", "30", "seqpipe-decoder-pod-0", timeout=60)
        out, _ = load.communicate(timeout=120)
        print(out, flush=True)
        figures = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(figures["lost"], 0, out)
        self.assertEqual(figures["twice"], 0, out)
        self.assertEqual(figures["ok"], figures["sent"], out)


if __name__ == "__main__":
    why = missing()
    if why:
        print(f"SKIP: {why}")
        sys.exit(0)
    unittest.main(verbosity=2)
