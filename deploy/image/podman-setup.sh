#!/bin/bash
# The podman settings a cgroup v1 (hybrid) host like this project's machines needs, written once
# to /etc/containers/containers.conf.d/50-seqpipe.conf (root): runc (crun refuses the hybrid
# hierarchy), cgroupfs (no systemd session to manage cgroups), events to a file (no journald),
# and default ulimits lowered to what the host allows. Does nothing on a cgroup v2 host.
set -euo pipefail
[[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]] && exit 0
conf=/etc/containers/containers.conf.d/50-seqpipe.conf
[[ -f "$conf" ]] && exit 0
mkdir -p "$(dirname "$conf")"
nofile=$(ulimit -Hn)
cat >"$conf" <<CONF
# Written by seqpipe's deploy/image/podman-setup.sh for a cgroup v1 (hybrid) host.
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
echo "wrote $conf"
