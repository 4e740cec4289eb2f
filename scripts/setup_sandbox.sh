#!/usr/bin/env bash
# What the code sandbox needs on a Debian or Ubuntu machine, as root:
#
#   scripts/setup_sandbox.sh
#
# installs docker.io (the engine), debootstrap (to build the image offline) and
# bubblewrap (the local fallback) when they are missing, starts dockerd in the
# background unless an engine already answers, and waits for it. Then build the
# image with: .venv/bin/agentgym sandbox build     (and check: agentgym sandbox check)
# DOCKERD_LOG chooses dockerd's log file.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    echo "run this as root (it installs packages and starts dockerd)" >&2
    exit 1
fi
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null \
        || ! command -v bwrap >/dev/null; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap bubblewrap
fi

log="${DOCKERD_LOG:-/var/log/agentgym-dockerd.log}"
if ! docker info >/dev/null 2>&1; then
    echo "starting dockerd (log: $log)"
    nohup dockerd >"$log" 2>&1 &
fi
for _ in $(seq 60); do
    if docker info >/dev/null 2>&1; then
        echo "Docker engine ready: $(docker version --format '{{.Server.Version}}')"
        exit 0
    fi
    sleep 1
done
echo "dockerd did not answer within 60 s; the end of $log:" >&2
tail -n 30 "$log" >&2
exit 1
