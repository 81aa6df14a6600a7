"""deploy/systemd's units started for real, under systemd as PID 1: a podman container of
deploy/image/build.sh --systemd's image (Debian 12, the runtime libraries and systemd; named by its
content, built when no image has that tag, reused when one does), booted with
`podman run --systemd=always`, CAP_SYS_ADMIN and a shared / (what systemd has on a machine, see
boot()), no network but its loopback. In it, as a user would on a Debian 12 machine:
deploy/systemd/install.sh as root from this checkout (mounted read-only: the bundled model, this
build's binaries), then `systemctl start seqpipe.target`.

Checked, each step timed: every stage becomes live (`seqpipe status`), `seqpipe send` is answered
with the correction, each encoder and decoder reports the compute type asked
(seqpipe_engine_info), every unit seqpipe.target wants is active and was never restarted (a unit
that crashes and restarts can look active between its crashes), and each unit's process sees /
read-only and a /tmp of its own (systemd applied the mount sandbox). First in float32, then in
int8 with install.sh --keys (CurveZMQ; the keys reach the units as systemd credentials) and the
target restarted: oneDNN's int8 kernels are compiled at run time (JIT), which
MemoryDenyWriteExecute= forbids. The batcher's encoder endpoint is a tcp:// one, so both hubs bind
a tcp:// endpoint under the units' RestrictAddressFamilies=.

Needs root, podman, runc, mmdebstrap, nsenter and curl; prints "SKIP: <why>" (exit 77) without
them, or when systemd as PID 1 does not come up in a podman container here. By hand:
    SEQPIPE_BUILD_DIR=build/release python3 tests/deploy/systemd_up_test.py
"""
import contextlib
import os
import re
import shutil
import sys
import tempfile
import time

from engines import BUILD_DIR, ROOT, SKIP, missing, run, running, this_checkouts_image

BUILD = os.path.abspath(BUILD_DIR)  # install.sh's --build, mounted at the same path

PREFIX = "seqpipe-systemd-test-"
NAME = f"{PREFIX}{os.getpid()}"
CONFIG = "/etc/seqpipe/pipeline.yaml"
KEYS_INSIDE = "/keys"  # the keys install.sh --keys installs, made by the test
# What `seqpipe send` and `status` need in the container once the pipeline runs CurveZMQ.
CLIENT_KEYS = ["--set", "security.server_key=/etc/seqpipe/keys/hub",
               "--set", "security.client_key=/etc/seqpipe/keys/client"]
# The metrics ports of the encoders' and decoders' first and second replica (a second process of
# a stage on one machine takes the next free port).
ENGINE_PORTS = {"encoder": (9120, 9121), "decoder": (9130, 9131)}
TEXT, CORRECTED = "teh speling", "the spelling"


@contextlib.contextmanager
def step(what):
    started = time.monotonic()
    yield
    print(f"{what}: {time.monotonic() - started:.1f} s", flush=True)


def inside(*args, timeout=60):
    return run("podman", "exec", NAME, *args, check=False, timeout=timeout)


def expect(ok, message):
    if not ok:
        raise AssertionError(message)


def sweep_stale():
    """Removes the containers of earlier runs killed before their clean-up (a ctest timeout)."""
    names = run("podman", "ps", "-a", "--format", "{{.Names}}", "--filter", f"name={PREFIX}").stdout
    for name in names.split():
        if name.startswith(PREFIX) and not running(name[len(PREFIX):]):
            run("podman", "rm", "-f", "-t", "5", name, check=False)


def boot(image, keys, within_s=60):
    """Starts the container with systemd as PID 1; None once it is up, else why it is not.
    As on a machine: systemd sets up each unit's mount sandbox (ProtectSystem=, PrivateTmp=, the
    credentials) only with CAP_SYS_ADMIN, and in a container without it skips that silently
    ("assuming containerized execution"); it marks / shared only when not in a container, and the
    credentials' ramfs, mounted in a helper namespace, reaches the unit only through a shared /."""
    mounts = ["-v", f"{ROOT}:{ROOT}:ro", "-v", f"{keys}:{KEYS_INSIDE}:ro"]
    if not BUILD.startswith(ROOT + os.sep):
        mounts += ["-v", f"{BUILD}:{BUILD}:ro"]
    run("podman", "run", "-d", "--name", NAME, "--systemd=always", "--cap-add", "SYS_ADMIN",
        "--network", "none", *mounts, image, "/bin/sh", "-c", "mount --make-rshared / && exec /sbin/init")
    deadline, state = time.monotonic() + within_s, None
    while time.monotonic() < deadline and state not in ("running", "degraded"):
        # Until PID 1 has made its socket, systemctl cannot connect ("Failed to connect to bus").
        asked = inside("systemctl", "is-system-running", "--wait", timeout=within_s)
        state = asked.stdout.strip() or asked.stderr.strip()
        if run("podman", "inspect", NAME, "--format", "{{.State.Running}}").stdout.strip() != "true":
            break
        if state not in ("running", "degraded"):
            time.sleep(0.2)
    if state not in ("running", "degraded"):
        logs = run("podman", "logs", NAME, check=False).stdout[-1000:]
        return f"systemd as PID 1 did not come up in a podman container in {within_s} s ({state!r}) {logs}"
    if state == "degraded":
        print(inside("systemctl", "--failed", "--no-pager").stdout, flush=True)
    return None


def wait_live(units, client, within_s=90):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        status = inside("seqpipe", "status", "--config", CONFIG, *client, timeout=30)
        if status.returncode == 0:
            return
        # A unit that crashed is restarting (Restart=on-failure), or failed after 5 starts in 10 s.
        restarts = inside("systemctl", "show", "--property", "NRestarts", "--value", *units).stdout.split()
        failed = inside("systemctl", "is-failed", *units).stdout.split()
        crashed = [u for u, n, state in zip(units, restarts, failed) if n != "0" or state == "failed"]
        expect(not crashed, f"crashed while starting: {' '.join(crashed)}")
        time.sleep(0.5)
    raise AssertionError(f"not every stage live after {within_s} s:\n{status.stdout}{status.stderr}")


def check_answer(client):
    answer = inside("seqpipe", "send", "--config", CONFIG, *client, TEXT, timeout=30)
    first = answer.stdout.splitlines()[0] if answer.stdout else ""
    expect(answer.returncode == 0 and first == CORRECTED,
           f"seqpipe send {TEXT!r}: {answer.stdout}{answer.stderr} (wanted {CORRECTED!r})")


def engine_compute_types(pid):
    """stage:port -> the compute type the process reports (seqpipe_engine_info)."""
    found = {}
    for stage, ports in ENGINE_PORTS.items():
        for port in ports:
            url = f"http://127.0.0.1:{port}/metrics"
            metrics = run("nsenter", f"--net=/proc/{pid}/ns/net", "curl", "-s", url, check=False,
                          timeout=10).stdout
            match = re.search(r'seqpipe_engine_info\{compute_type="([^"]+)",stage="' + stage + '"', metrics)
            found[f"{stage}:{port}"] = match.group(1) if match else None
    return found


def check_units(units):
    """Every unit active, and never restarted by systemd since it was last started."""
    states = inside("systemctl", "is-active", *units).stdout.split()
    restarts = inside("systemctl", "show", "--property", "NRestarts", "--value", *units).stdout.split()
    expect(states == ["active"] * len(units), f"is-active: {dict(zip(units, states))}")
    expect(restarts == ["0"] * len(units), f"NRestarts: {dict(zip(units, restarts))}")


def check_sandbox(units):
    """Each unit's process sees the system read-only (ProtectSystem=strict) and a /tmp of its own
    (PrivateTmp=): systemd applied the units' mount sandbox."""
    script = "; ".join(f"echo '== {u}'; cat /proc/$(systemctl show -p MainPID --value {u})/mountinfo"
                       for u in units)
    tables = inside("sh", "-c", script).stdout.split("== ")[1:]
    for unit, table in (t.split("\n", 1) for t in tables):
        mounts = {fields[4]: fields for fields in (line.split() for line in table.splitlines())}
        expect("/" in mounts and "ro" in mounts["/"][5].split(","), f"{unit}: / is not read-only")
        expect("/tmp" in mounts and "systemd-private-" in mounts["/tmp"][3], f"{unit}: /tmp is not its own")


def serve(compute_type, units, pid, client):
    """Waits until the pipeline serves `compute_type`, then checks an answer and every unit."""
    with step(f"{compute_type}: every stage live"):
        wait_live(units, client)
    with step(f"{compute_type}: '{TEXT}' answered '{CORRECTED}'"):
        check_answer(client)
    types = engine_compute_types(pid)
    expect(set(types.values()) == {compute_type}, f"the engines' compute types: {types}")
    check_sandbox(units)
    time.sleep(3)  # a unit in a crash loop (RestartSec=1) restarts within this
    check_units(units)
    print(f"{compute_type}: every unit active, none restarted, sandboxed ({len(units)} units)", flush=True)


def install(compute_type, keys):
    """install.sh as root in the container (with --keys: CurveZMQ, the keys as credentials), and
    over its config the compute type and the batcher's encoder endpoint on tcp:// (so that both
    hubs bind a tcp:// endpoint)."""
    with step(f"install.sh{' --keys' if keys else ''} (as root in the container)"):
        args = ["--keys", KEYS_INSIDE] if keys else []
        script = os.path.join(ROOT, "deploy/systemd/install.sh")
        installed = inside(script, "--build", BUILD, *args, timeout=120)
        expect(installed.returncode == 0, f"install.sh: {installed.stdout}{installed.stderr}")
        inside("sed", "-i", f"s/^model:$/model:\\n  compute_type: {compute_type}/", CONFIG)
        inside("sh", "-c", f"printf 'batcher:\\n  encoder_endpoint: tcp://127.0.0.1:5601\\n' >> {CONFIG}")
        inside("systemctl", "daemon-reload")


def make_keys(folder):
    """The hubs' and the clients' key pairs (docs/DEPLOY.md, Keys), the clients' allowed."""
    run(os.path.join(BUILD, "tools/seqpipe"), "keygen", "--dir", folder, "hub", "client")
    os.mkdir(os.path.join(folder, "allowed"))
    shutil.copy(os.path.join(folder, "client"), os.path.join(folder, "allowed"))


def test(image, keys):
    with step("boot (systemd as PID 1)"):
        why = boot(image, keys)
    if why:
        print(f"SKIP: {why}")
        return SKIP
    pid = run("podman", "inspect", NAME, "--format", "{{.State.Pid}}").stdout.strip()
    try:
        install("float32", keys=False)
        with step("systemctl start seqpipe.target"):
            started = inside("systemctl", "start", "seqpipe.target")
            expect(started.returncode == 0, f"systemctl start: {started.stderr}")
        wanted = inside("systemctl", "show", "--property", "Wants", "--value", "seqpipe.target").stdout
        units = sorted(wanted.split())
        expect(len(units) == 10, f"seqpipe.target wants {units}")
        serve("float32", units, pid, client=[])
        install("int8", keys=True)
        with step("systemctl restart seqpipe.target (int8, CurveZMQ)"):
            restarted = inside("systemctl", "restart", "seqpipe.target")
            expect(restarted.returncode == 0, f"systemctl restart: {restarted.stderr}")
        serve("int8", units, pid, client=CLIENT_KEYS)
    except AssertionError as failure:
        print(f"FAILED: {failure}")
        print(inside("systemctl", "list-units", "seqpipe*", "--all", "--no-pager").stdout)
        print(inside("journalctl", "--no-pager", "-n", "60", "-u", "seqpipe-*").stdout)
        return 1
    return 0


def main():
    why = missing(("podman", "runc", "mmdebstrap", "nsenter", "curl"))
    if why:
        print(f"SKIP: {why}")
        return SKIP
    sweep_stale()
    with step("image"):
        image = this_checkouts_image(systemd=True)
    keys = tempfile.mkdtemp(prefix="seqpipe-systemd-keys-")
    try:
        make_keys(keys)
        return test(image, keys)
    finally:
        with step("stop (systemd shuts the units down)"):
            run("podman", "rm", "-f", "-t", "20", NAME, check=False, timeout=60)
        shutil.rmtree(keys, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
