#!/bin/bash
# The podman settings a cgroup v1 (hybrid) host like this project's machines needs, written once
# to /etc/containers/containers.conf.d/50-seqpipe.conf (root): runc (crun refuses the hybrid
# hierarchy), cgroupfs (no systemd session to manage cgroups), events to a file (no journald),
# default ulimits lowered to what the host allows (files: the hard limit; threads: 4096), and the
# netavark network backend.
# Does nothing on a cgroup v2 host, or when the file is there already.
set -euo pipefail
[[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]] && exit 0
# Podman's defaults (about a million files and processes) are above what these hosts let a
# container's runtime set ("error setting rlimits ... operation not permitted"); seen here: runc
# could set nproc up to 32768 while the shell's hard limit said 96365, so a modest 4096 threads
# (a seqpipe process runs tens).
nofile=$(ulimit -Hn) nproc=4096
conf=/etc/containers/containers.conf.d/50-seqpipe.conf
grep -q "nproc=$nproc:" "$conf" 2>/dev/null && grep -q netavark "$conf" && exit 0
mkdir -p "$(dirname "$conf")"
cat >"$conf" <<CONF
# Written by seqpipe's deploy/image/podman-setup.sh for a cgroup v1 (hybrid) host.
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
[network]
# netavark + aardvark-dns: names on an --internal network (CNI's dnsname refuses internal ones),
# which tests/deploy/podman_test.py plays the pods on. Set before any container exists.
network_backend = "netavark"
CONF
echo "wrote $conf"
