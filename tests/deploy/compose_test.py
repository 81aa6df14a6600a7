"""deploy/compose: the compose file, its Dockerfile and its package lists.

- Debian's `docker-compose config` accepts deploy/compose/compose.yaml (no Docker engine needed),
  with one service per stage, the workers replicated, the model mounted read-only, a healthcheck
  on every service and a Prometheus alongside.
- Every seqpipe service's command and healthcheck name an executable the project builds and the
  image installs; each service's config (config/compose.yaml plus its --set overrides) loads.
- The ports in compose.yaml and deploy/compose/prometheus.yml are the stages' metrics_port.
- The build stage installs scripts/debian-packages.txt (the one list) through
  scripts/install-deps.sh; the runtime stage installs deploy/compose/runtime-packages.txt, every
  package of which is in the one list, and which (with its dependencies) provides every shared
  library `ldd` lists for the built binaries.

Only the checks that need docker-compose (Debian package `docker-compose`) skip without it.
Environment: SEQPIPE_BUILD_DIR (the Release build tree).
"""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ["SEQPIPE_BUILD_DIR"]
COMPOSE_DIR = os.path.join(SOURCE, "deploy/compose")
DOCKERFILE = os.path.join(COMPOSE_DIR, "Dockerfile")
STAGES = ["gateway", "batcher", "tokenizer", "encoder", "decoder", "postprocessor"]
WORKERS = ["tokenizer", "encoder", "decoder", "postprocessor"]
DOCKER_COMPOSE = shutil.which("docker-compose")


def package_list(path):
    with open(path) as f:
        return [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]


def read(path):
    with open(path) as f:
        return f.read()


def dockerfile_stages():
    """The Dockerfile's instructions (continuation lines joined), split at each FROM."""
    text = re.sub(r"\\\n", " ", read(DOCKERFILE))
    stages = []
    for line in text.splitlines():
        line = " ".join(line.split())
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def installed_executables():
    """name -> build-tree path of every binary the runtime stage copies to /usr/local/bin."""
    out = {}
    for line in dockerfile_stages()[-1]:
        m = re.fullmatch(r"COPY --from=build /src/build/release/(\S+) /usr/local/bin/(\S+)", line)
        if m:
            out[m.group(2)] = m.group(1)
    return out


def metrics_ports():
    import yaml  # python3-yaml (docker-compose depends on it)
    config = yaml.safe_load(read(os.path.join(SOURCE, "config/pipeline.yaml")))
    return {stage: config[stage]["metrics_port"] for stage in STAGES}


class DockerfileTest(unittest.TestCase):
    def test_two_stages_on_debian_12(self):
        stages = dockerfile_stages()
        self.assertEqual(len(stages), 2)
        self.assertEqual(stages[0][0], "FROM debian:12 AS build")
        self.assertEqual(stages[1][0], "FROM debian:12")

    def test_build_stage_installs_the_one_package_list(self):
        build = dockerfile_stages()[0]
        self.assertIn("COPY scripts/install-deps.sh scripts/debian-packages.txt /src/scripts/", build)
        self.assertTrue(any(line.startswith("RUN /src/scripts/install-deps.sh") for line in build), build)
        self.assertIn("ARG SEQPIPE_MARCH=x86-64-v3", build, "a portable -march, not the builder's native")
        self.assertTrue(any('-DSEQPIPE_MARCH="$SEQPIPE_MARCH"' in line for line in build), build)
        self.assertFalse([line for line in build if "apt-get install" in line],
                         "the build stage must install through scripts/install-deps.sh only")
        # install-deps.sh reads the list next to it: the one list.
        self.assertIn('"$here/debian-packages.txt"', read(os.path.join(SOURCE, "scripts/install-deps.sh")))

    def test_runtime_stage_installs_only_its_list_and_runs_as_a_user(self):
        runtime = dockerfile_stages()[1]
        self.assertIn("COPY deploy/compose/runtime-packages.txt /tmp/runtime-packages.txt", runtime)
        installs = [line for line in runtime if "apt-get install" in line]
        self.assertEqual(len(installs), 1, installs)
        # The packages come from the file through xargs, none named on the line itself.
        self.assertIn("grep -vE '^\\s*(#|$)' /tmp/runtime-packages.txt | DEBIAN_FRONTEND=noninteractive "
                      "xargs apt-get install -y -qq --no-install-recommends && rm", installs[0])
        users = [line for line in runtime if line.startswith("USER ")]
        self.assertEqual(users, ["USER seqpipe"])
        self.assertIn("useradd --system", " ".join(runtime))

    def test_runtime_packages_are_in_the_one_list(self):
        everything = set(package_list(os.path.join(SOURCE, "scripts/debian-packages.txt")))
        runtime = package_list(os.path.join(COMPOSE_DIR, "runtime-packages.txt"))
        self.assertTrue(runtime)
        self.assertEqual([p for p in runtime if p not in everything], [],
                         "runtime packages missing from scripts/debian-packages.txt")

    def test_image_holds_every_service_and_the_tool_as_built(self):
        copies = installed_executables()
        self.assertEqual(set(copies), {"seqpipe"} | {f"seqpipe-{s}" for s in STAGES})
        targets = re.search(r"--target ((?:[\w-]+ ?)+)", " ".join(dockerfile_stages()[0])).group(1).split()
        for name, path in copies.items():
            self.assertEqual(os.path.basename(path), name)
            self.assertIn(name, targets, f"{name} is not among the build stage's --target list")
            built = os.path.join(BUILD, path)
            self.assertTrue(os.access(built, os.X_OK), f"{path} is not an executable of the build tree")

    def test_runtime_packages_provide_every_linked_library(self):
        closure = dependency_closure(package_list(os.path.join(COMPOSE_DIR, "runtime-packages.txt")))
        needed = {}  # library path -> the binaries that link it
        for name, path in installed_executables().items():
            ldd = subprocess.run(["ldd", os.path.join(BUILD, path)], capture_output=True, text=True, check=True)
            for lib in re.findall(r"=> (/\S+)", ldd.stdout):
                needed.setdefault(lib, []).append(name)
        owners = owning_packages(needed)
        missing = {f"{os.path.basename(lib)} ({owners[lib]})": users
                   for lib, users in needed.items() if owners[lib] not in closure}
        self.assertEqual(missing, {}, "libraries no runtime package provides")


def owning_packages(paths):
    """path -> the Debian package that ships it (merged /usr: either spelling may be recorded)."""
    spellings = {}
    for path in paths:
        real = os.path.realpath(path)
        for p in (path, real):
            spellings.setdefault(p, path)
            spellings.setdefault(p[len("/usr"):] if p.startswith("/usr/") else "/usr" + p, path)
    # One call: dpkg-query exits 1 when some spelling is unknown but lists the ones it knows.
    r = subprocess.run(["dpkg-query", "-S", *spellings], capture_output=True, text=True)
    owners = {}
    for line in r.stdout.splitlines():
        package, _, file = line.partition(": ")
        if file in spellings:
            owners.setdefault(spellings[file], package.split(",")[0].split(":")[0].strip())
    unowned = [p for p in paths if p not in owners]
    if unowned:
        raise AssertionError(f"no package owns {unowned}")
    return owners


def dependency_closure(packages):
    """The packages and, recursively, their installed Depends/Pre-Depends."""
    listing = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Depends}, ${Pre-Depends}\n"],
                             capture_output=True, text=True, check=True).stdout
    depends = {}
    for line in listing.splitlines():
        name, status, deps = line.split("\t")
        if status.startswith("ii"):
            depends[name] = deps
    seen, todo = set(), list(packages)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        deps = depends.get(p)
        if deps is None:
            raise AssertionError(f"{p} is not installed here")
        for group in deps.split(","):
            # "a (>= 1) | b": the first alternative that is installed.
            for alternative in group.split("|"):
                name = alternative.strip().split(" ")[0].split(":")[0]
                if name in depends:
                    todo.append(name)
                    break
    return seen


@unittest.skipIf(DOCKER_COMPOSE is None, "docker-compose is not installed (Debian package `docker-compose`)")
class ComposeFileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import yaml
        cls.model = tempfile.mkdtemp(prefix="seqpipe-compose-")
        r = subprocess.run([DOCKER_COMPOSE, "-f", os.path.join(COMPOSE_DIR, "compose.yaml"), "config"],
                           capture_output=True, text=True, env=dict(os.environ, SEQPIPE_MODEL=cls.model))
        if r.returncode != 0:
            raise AssertionError("docker-compose config failed:\n" + r.stderr)
        cls.config = yaml.safe_load(r.stdout)
        cls.services = cls.config["services"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.model, ignore_errors=True)

    def test_one_service_per_stage_and_prometheus(self):
        self.assertEqual(set(self.services), set(STAGES) | {"prometheus"})
        for stage in WORKERS:
            self.assertEqual(self.services[stage]["deploy"]["replicas"], 2, stage)
        for hub in ["gateway", "batcher"]:
            self.assertNotIn("deploy", self.services[hub], "one gateway and one batcher")
        self.assertIn("5555:5555", [f"{p['published']}:{p['target']}" if isinstance(p, dict) else p
                                    for p in self.services["gateway"]["ports"]])

    def test_model_mounted_read_only_and_the_config(self):
        for stage in STAGES:
            volumes = self.services[stage]["volumes"]
            self.assertIn(f"{self.model}:/var/lib/seqpipe/model:ro", volumes, stage)
            self.assertIn(os.path.join(SOURCE, "config/compose.yaml") + ":/etc/seqpipe/pipeline.yaml:ro",
                          volumes, stage)

    def test_every_service_has_a_healthcheck_and_commands_name_built_executables(self):
        built = installed_executables()
        for stage in STAGES:
            service = self.services[stage]
            command = service["command"]
            self.assertEqual(command[0], f"seqpipe-{stage}")
            self.assertIn(command[0], built)
            test = service["healthcheck"]["test"]
            self.assertEqual(test[0], "CMD", stage)
            self.assertIn(test[1], set(built) | {"bash"}, stage)
        self.assertEqual(self.services["gateway"]["healthcheck"]["test"][1:3], ["seqpipe", "status"])

    def test_keys_are_the_secrets_the_config_reads(self):
        import yaml
        security = yaml.safe_load(read(os.path.join(SOURCE, "config/compose.yaml")))["security"]
        self.assertEqual(security, {"server_key": "/run/secrets/hub",
                                    "client_key": "/run/secrets/client",
                                    "allowed_clients": "/etc/seqpipe/allowed"})
        for stage in STAGES:
            service = self.services[stage]
            secrets = {s["source"] if isinstance(s, dict) else s for s in service["secrets"]}
            hub = stage in ("gateway", "batcher")
            self.assertEqual(secrets, {"hub", "client_secret"} | ({"hub_secret"} if hub else set()),
                             stage)
            allow_list = [v for v in service["volumes"] if v.endswith(":/etc/seqpipe/allowed:ro")]
            self.assertEqual(len(allow_list), 1 if hub else 0, stage)

    def test_each_service_config_loads(self):
        # `seqpipe status` loads the config the way the service does: exit 2 is a bad config;
        # 1 (no hub answers here) is expected. The keys are read from stand-ins for the secrets.
        seqpipe = os.path.join(BUILD, installed_executables()["seqpipe"])
        run_dir = tempfile.mkdtemp(prefix="seqpipe-compose-run-")
        keys = os.path.join(run_dir, "keys")
        os.mkdir(keys)
        subprocess.run([seqpipe, "keygen", "--dir", keys, "hub", "client"], check=True,
                       capture_output=True, timeout=30)
        try:
            for stage in STAGES:
                args = self.services[stage]["command"][1:]
                self.assertEqual(args[:2], ["--config", "/etc/seqpipe/pipeline.yaml"])
                args = ["--config", os.path.join(SOURCE, "config/compose.yaml")] + args[2:]
                args += ["--set", f"security.server_key={keys}/hub",
                         "--set", f"security.client_key={keys}/client"]
                r = subprocess.run([seqpipe, "status", *args, "--set", f"runtime_dir={run_dir}"],
                                   capture_output=True, text=True, timeout=30)
                self.assertNotEqual(r.returncode, 2, f"{stage}: {r.stderr}")
                self.assertIn("ready: no", r.stdout, stage)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def test_ports_are_the_metrics_ports(self):
        ports = metrics_ports()
        for stage in STAGES:
            service = self.services[stage]
            self.assertIn(str(ports[stage]), [str(p) for p in service["expose"]], stage)
            if stage != "gateway":
                self.assertIn(f"/dev/tcp/127.0.0.1/{ports[stage]} ", service["healthcheck"]["test"][-1], stage)
        import yaml
        scrape = yaml.safe_load(read(os.path.join(COMPOSE_DIR, "prometheus.yml")))
        (job,) = scrape["scrape_configs"]
        targets = {tuple(sd["names"]): sd["port"] for sd in job["dns_sd_configs"]}
        self.assertEqual(targets, {(stage,): ports[stage] for stage in STAGES})
        self.assertEqual(self.services["prometheus"]["volumes"][0],
                         os.path.join(COMPOSE_DIR, "prometheus.yml") + ":/etc/prometheus/prometheus.yml:ro")

    @unittest.skipIf(shutil.which("promtool") is None, "promtool is not installed (Debian package `prometheus`)")
    def test_prometheus_config_is_valid(self):
        r = subprocess.run(["promtool", "check", "config", os.path.join(COMPOSE_DIR, "prometheus.yml")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    if DOCKER_COMPOSE is None:
        print("SKIP (compose file checks): docker-compose is not installed (Debian package `docker-compose`); "
              "the Dockerfile and package checks still run")
    unittest.main(verbosity=2)
