#!/usr/bin/env python3
"""Writes the Swarm stack file to standard output: deploy/compose/compose.yaml with
deploy/swarm/stack.yaml's changes, merged by Debian's docker-compose (`config`: variables filled
in, anchors merged, paths made absolute), in the Compose file format 3.8 `docker stack deploy`
reads: `build` and `depends_on` go (Swarm ignores both; 3.8 takes no depends_on conditions).
    SEQPIPE_KEYS=... SEQPIPE_MODEL=... deploy/swarm/render.py > seqpipe-stack.yaml
    docker stack deploy --resolve-image never -c seqpipe-stack.yaml seqpipe
--without SERVICE (repeatable) leaves a service out (e.g. prometheus where no registry is reached).
"""
import argparse
import os
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
COMPOSE = os.path.join(HERE, "..", "compose", "compose.yaml")

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--without", action="append", default=[], metavar="SERVICE")
args = parser.parse_args()
merged = subprocess.run(["docker-compose", "-f", COMPOSE, "-f", os.path.join(HERE, "stack.yaml"), "config"],
                        capture_output=True, text=True)
if merged.returncode != 0:
    sys.exit(f"docker-compose config failed: {merged.stderr}")
stack = yaml.safe_load(merged.stdout)
stack["version"] = "3.8"
for name in args.without:
    del stack["services"][name]
for service in stack["services"].values():
    service.pop("build", None)
    service.pop("depends_on", None)
yaml.safe_dump(stack, sys.stdout, sort_keys=False)
