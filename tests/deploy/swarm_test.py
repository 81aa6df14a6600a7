"""A two-node Docker Swarm, for real, in two network namespaces this test makes (joined by a veth
pair, addresses only inside them): Debian's dockerd in each, the manager on node A and a worker
on node B, this checkout's image loaded in both, and the stack deployed from
deploy/compose/compose.yaml with deploy/swarm/stack.yaml's changes (deploy/swarm/render.py;
without Prometheus: its image is on a registry these machines do not reach). The hubs run on
the manager, a replica of each worker stage on each node. Under load from node A (CurveZMQ, to the gateway's host port):
node B is cut off (its link down) and brought back, then the decoders are rolled
(`docker service update --force`, one at a time, start-first), each under 20 requests/s: 0
requests lost in each (engines.check_load); the figures are printed.

Needs root, podman, runc, mmdebstrap and dockerd (scripts/debian-packages.txt); prints
"SKIP: <why>" (exit 77) without them. By hand:
    SEQPIPE_BUILD_DIR=build/release python3 tests/deploy/swarm_test.py
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from engines import (HERE, ROOT, SKIP, Dockerd, check_load, make_keys, make_netns, missing, remove_netns,
                     run, save_image, sweep_stale, this_checkouts_image)

NODES = {"a": f"seqpipe-swarm-a-{os.getpid()}", "b": f"seqpipe-swarm-b-{os.getpid()}"}
ADDRESS = {"a": "198.18.213.1", "b": "198.18.213.2"}  # the veth pair's ends, in the namespaces
LINK = {"a": "swarm-a", "b": "swarm-b"}
STACK = "seqpipe"
CONFIG = "/etc/seqpipe/pipeline.yaml"  # where compose.yaml mounts config/compose.yaml


def wait_for(what, check, within_s, every_s=1.0):
    """Calls check() until it returns a true value, at most within_s seconds; fails saying what."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"{what}: not after {within_s} s")


class SwarmTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sweep_stale()
        image = this_checkouts_image()
        cls.work = tempfile.mkdtemp(prefix="seqpipe-swarm-")
        cls.keys = os.path.join(cls.work, "keys")
        os.mkdir(cls.keys)
        cls.engines = {}
        try:
            cls.make_nodes()
            archive = os.path.join(cls.work, "image.tar")
            save_image(image, archive)
            for node, netns in NODES.items():
                cls.engines[node] = Dockerd(netns).start()
                cls.engines[node].load(archive, image, "seqpipe:latest")
            os.remove(archive)
            cls.make_swarm()
            cls.deploy()
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def make_nodes(cls):
        for netns in NODES.values():
            make_netns(netns)
        run("ip", "-n", NODES["a"], "link", "add", LINK["a"], "type", "veth", "peer", "name", LINK["b"],
            "netns", NODES["b"])
        for node, netns in NODES.items():
            run("ip", "-n", netns, "addr", "add", f"{ADDRESS[node]}/24", "dev", LINK[node])
            run("ip", "-n", netns, "link", "set", LINK[node], "up")

    @classmethod
    def make_swarm(cls):
        manager, worker = cls.engines["a"], cls.engines["b"]
        manager.docker("swarm", "init", "--advertise-addr", ADDRESS["a"], "--listen-addr", f"{ADDRESS['a']}:2377")
        token = manager.docker("swarm", "join-token", "-q", "worker").stdout.strip()
        worker.docker("swarm", "join", "--token", token, "--advertise-addr", ADDRESS["b"], f"{ADDRESS['a']}:2377")
        wait_for("both nodes ready", lambda: manager.docker(
            "node", "ls", "--format", "{{.Status}}").stdout.split() == ["Ready", "Ready"], 60)

    @classmethod
    def deploy(cls):
        make_keys(cls.keys)
        manager = cls.engines["a"]
        stack = os.path.join(cls.work, "stack.yaml")
        env = dict(manager.env, SEQPIPE_KEYS=cls.keys)
        rendered = run("/usr/bin/python3", os.path.join(ROOT, "deploy/swarm/render.py"), "--without", "prometheus",
                       env=env).stdout
        with open(stack, "w") as f:
            f.write(rendered)
        deployed = manager.docker("stack", "deploy", "--resolve-image", "never", "-c", stack, STACK, check=False)
        if deployed.returncode != 0:
            raise RuntimeError(f"docker stack deploy failed: {deployed.stdout}{deployed.stderr}")
        started = time.monotonic()
        wait_for("the pipeline live", lambda: cls.gateway_exec("seqpipe", "status", "--config", CONFIG)
                 .returncode == 0, 240, every_s=2)
        print(f"\nthe stack live {time.monotonic() - started:.1f} s after deploy", flush=True)
        print(manager.docker("service", "ls").stdout, flush=True)

    @classmethod
    def gateway_exec(cls, *args):
        manager = cls.engines["a"]
        ids = manager.docker("ps", "-q", "--filter", f"name={STACK}_gateway", check=False).stdout.split()
        if not ids:
            return subprocess.CompletedProcess(args, 1, "", "no gateway container")
        return manager.docker("exec", ids[0], *args, check=False, timeout=30)

    @classmethod
    def tearDownClass(cls):
        for node in ("b", "a"):
            if node in cls.engines:
                cls.engines[node].docker("swarm", "leave", "--force", check=False, timeout=60)
                cls.engines[node].stop()
        for netns in NODES.values():
            remove_netns(netns)
        shutil.rmtree(cls.work, ignore_errors=True)

    def load(self, count, rate):
        return subprocess.Popen(["nsenter", f"--net=/run/netns/{NODES['a']}", "/usr/bin/python3",
                                 os.path.join(HERE, "kube_load.py"), str(count), str(rate),
                                 os.path.join(self.keys, "hub"), os.path.join(self.keys, "me")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def figures(self, load, what):
        out, _ = load.communicate(timeout=300)
        print(f"{what}: {out}", flush=True)
        check_load(self, out)

    def test_a_node_partition_and_a_rolling_update_lose_nothing(self):
        manager = self.engines["a"]
        answer = self.gateway_exec("seqpipe", "send", "--config", CONFIG, "teh speling")
        self.assertEqual(answer.returncode, 0, answer.stdout + answer.stderr)

        node_b = self.engines["b"].docker("info", "--format", "{{.Swarm.NodeID}}").stdout.strip()
        on_b = manager.docker("node", "ps", node_b, "--filter", "desired-state=running",
                              "--format", "{{.Name}}").stdout.split()
        print("tasks on node B:", " ".join(sorted(on_b)), flush=True)
        self.assertTrue(any(".decoder" in task or "_decoder." in task for task in on_b), on_b)

        load = self.load(400, 20)
        time.sleep(3)
        run("ip", "-n", NODES["b"], "link", "set", LINK["b"], "down")
        time.sleep(10)
        run("ip", "-n", NODES["b"], "link", "set", LINK["b"], "up")
        self.figures(load, "node B cut off for 10 s")

        load = self.load(1000, 20)
        time.sleep(3)
        started = time.monotonic()
        rolled = manager.docker("service", "update", "--force", "--detach=false", f"{STACK}_decoder",
                                check=False, timeout=240)
        self.assertEqual(rolled.returncode, 0, rolled.stdout + rolled.stderr)
        print(f"decoders rolled in {time.monotonic() - started:.1f} s", flush=True)
        self.figures(load, "decoders rolled")


if __name__ == "__main__":
    why = missing(("podman", "runc", "mmdebstrap", "dockerd", "nsenter"))
    if why:
        print(f"SKIP: {why}")
        sys.exit(SKIP)
    unittest.main(verbosity=2)
