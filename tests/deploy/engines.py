"""What the container tests share: this checkout's image (built under a tag named by its content,
or reused when that tag exists) and Docker engines (Debian's dockerd) each in a network
namespace the test makes, so nothing they publish or route reaches the host's interfaces.
Every wait is bounded; Dockerd.stop() undoes all that start() did, also after a failure."""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD_DIR = os.environ.get("SEQPIPE_BUILD_DIR", os.path.join(ROOT, "build/release"))
BUILD_SH = os.path.join(ROOT, "deploy/image/build.sh")
DOCKER = "/usr/bin/docker"  # Debian's docker.io CLI (another `docker` may come first in PATH)
SKIP = 77  # ctest's SKIP_RETURN_CODE


def run(*args, check=True, timeout=120, **kwargs):
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=timeout, **kwargs)


def missing(tools):
    """Why this machine cannot run a container test, or None."""
    if os.geteuid() != 0:
        return "needs root (the image's root file system, network namespaces, the engines)"
    for tool in tools:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-deps.sh installs all but kubectl)"
    return None


def this_checkouts_image(systemd=False):
    """The podman image of this build's binaries: reused when its content tag exists, else built
    by deploy/image/build.sh (minutes). Other content-tagged images of its repository are removed.
    systemd: build.sh --systemd's image instead (systemd as init; its tag names only the image's
    inputs, so a change of the binaries keeps it)."""
    variant = ["--systemd"] if systemd else []
    tag = run(BUILD_SH, "--print-content-tag", *variant, "--build-dir", BUILD_DIR).stdout.strip()
    repository = tag.rsplit(":", 1)[0]
    for old in run("podman", "images", "--format", "{{.Repository}}:{{.Tag}}",
                   "--filter", f"reference={repository}:src-*").stdout.split():
        if old != tag:
            run("podman", "rmi", "-f", old, check=False)
    if run("podman", "image", "exists", tag, check=False).returncode == 0:
        print(f"reusing {tag} (the same inputs)", flush=True)
        return tag
    started = time.monotonic()
    built = subprocess.run([BUILD_SH, "--engine", "podman", *variant, "--build-dir", BUILD_DIR, "--tag", tag],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    if built.returncode != 0:
        raise RuntimeError(f"deploy/image/build.sh failed:\n{built.stdout[-4000:]}")
    print(f"built {tag} in {time.monotonic() - started:.0f} s", flush=True)
    return tag


def check_load(test, out):
    """Asserts a kube_load.py run's figures: none lost, none answered twice, at least half ok. The
    rest may be explicit error answers: on a 2-core machine loaded by other builds the containers
    shed load (`overloaded`, seen at 20-40 requests/s with a load average of 15)."""
    figures = json.loads(out.strip().splitlines()[-1])
    test.assertEqual(figures["lost"], 0, out)
    test.assertEqual(figures["twice"], 0, out)
    test.assertGreaterEqual(figures["ok"], 0.5 * figures["sent"], out)


def make_keys(folder):
    """CurveZMQ keys as docs/DEPLOY.md makes them for compose: the hubs' pair, the containers'
    client pair and the test's own ("me"), both clients allowed; the secret keys the containers
    read belong to the image's user (uid 10001)."""
    run(os.path.join(BUILD_DIR, "tools/seqpipe"), "keygen", "--dir", folder, "hub", "client", "me")
    os.mkdir(os.path.join(folder, "allowed"))
    for name in ("client", "me"):
        shutil.copy(os.path.join(folder, name), os.path.join(folder, "allowed"))
    for secret in ("hub_secret", "client_secret"):
        os.chown(os.path.join(folder, secret), 10001, 10001)


def save_image(podman_tag, archive):
    """Writes a podman image as a docker-archive, for Dockerd.load."""
    run("podman", "save", "--format", "docker-archive", "-o", archive, podman_tag, timeout=300)


class Dockerd:
    """A dockerd of its own (data, state, socket, config under a temporary folder) in the network
    namespace `netns` (made by the caller), entered with nsenter --net: `ip netns exec` would
    remount /sys and hide the cgroup hierarchy dockerd needs."""

    def __init__(self, netns, extra_args=()):
        self.netns, self.extra_args = netns, list(extra_args)
        self.work = tempfile.mkdtemp(prefix="seqpipe-dockerd-")
        self.sock = os.path.join(self.work, "docker.sock")
        self.env = dict(os.environ, DOCKER_HOST=f"unix://{self.sock}")
        self.process = None

    def start(self, within_s=90):
        config = os.path.join(self.work, "daemon.json")
        with open(config, "w") as f:
            json.dump({}, f)  # not the host's /etc/docker/daemon.json
        self.log = open(os.path.join(self.work, "dockerd.log"), "w")
        self.process = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.netns}", "dockerd", "--config-file", config,
             "--data-root", os.path.join(self.work, "data"), "--exec-root", os.path.join(self.work, "x"),
             "--pidfile", os.path.join(self.work, "dockerd.pid"), "-H", f"unix://{self.sock}",
             *self.extra_args], stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dockerd in {self.netns} exited: {self.tail()}")
            if self.docker("info", check=False, timeout=10).returncode == 0:
                return self
            time.sleep(0.5)
        raise RuntimeError(f"dockerd in {self.netns} not up after {within_s} s: {self.tail()}")

    def tail(self):
        with open(os.path.join(self.work, "dockerd.log")) as f:
            return f.read()[-3000:]

    def docker(self, *args, check=True, timeout=120, **kwargs):
        return run(DOCKER, *args, check=check, timeout=timeout, env=self.env, **kwargs)

    def load(self, archive, image, *names):
        """Loads `image` from a docker-archive (save_image) into this engine under `names`."""
        self.docker("load", "-i", archive, timeout=300)
        for name in names:
            self.docker("tag", image, name)

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            ids = self.docker("ps", "-aq", check=False, timeout=30).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, check=False, timeout=120)
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        if self.process is not None:
            self.log.close()
        # What a killed dockerd may leave mounted under its folders (overlays, namespaces).
        unmount_under(self.work)
        shutil.rmtree(self.work, ignore_errors=True)


def sweep_stale():
    """Removes what an earlier run killed before its clean-up (a ctest timeout) left: its
    namespaces (named with the pid of a test no longer running) and the processes in them (its
    dockerd and containerd), its dockerd folders (their dockerd gone, made over 10 minutes ago)
    and the processes whose mount table still names them
    (its containers)."""
    for name in run("ip", "netns", "list").stdout.split():
        match = re.fullmatch(r"seqpipe-(?:compose|swarm-[ab])-(\d+)", name)
        if match and not running(match.group(1)):
            inode = os.stat(f"/run/netns/{name}").st_ino
            kill_where(lambda pid: os.stat(f"/proc/{pid}/ns/net").st_ino == inode)
            remove_netns(name)
    own_mounts = os.stat("/proc/self/ns/mnt").st_ino
    for work in glob.glob(os.path.join(tempfile.gettempdir(), "seqpipe-dockerd-*")):
        try:
            with open(os.path.join(work, "dockerd.pid")) as f:
                alive = running(f.read().strip())
        except OSError:
            alive = False
        if not alive and time.time() - os.stat(work).st_mtime > 600:  # not one starting now
            unmount_under(work)  # first: then only the containers' own mount tables name it
            kill_where(lambda pid: os.stat(f"/proc/{pid}/ns/mnt").st_ino != own_mounts
                       and work + "/" in read(f"/proc/{pid}/mountinfo"))
            shutil.rmtree(work, ignore_errors=True)


def running(pid):
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def read(path):
    with open(path) as f:
        return f.read()


def kill_where(test):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(pid) != os.getpid() and test(pid):
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass  # gone meanwhile


def unmount_under(folder):
    with open("/proc/self/mounts") as f:
        mounts = [line.split()[1] for line in f if line.split()[1].startswith(folder)]
    for mount in sorted(mounts, key=len, reverse=True):
        run("umount", "-l", mount, check=False)


def make_netns(name):
    run("ip", "netns", "add", name)
    run("ip", "-n", name, "link", "set", "lo", "up")


def remove_netns(name):
    run("ip", "netns", "del", name, check=False)
