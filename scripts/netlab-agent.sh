#!/usr/bin/env bash
# netlab-agent.sh — Open MPI's remote agent (instead of ssh) for the emulated cluster of
# scripts/netlab.sh: `netlab-agent.sh [OPTIONS] HOST COMMAND...` runs COMMAND with sh inside
# the lab's namespace for HOST (h0, h1, ...), as ssh would run it on a machine.
# Not here: making the lab (netlab.sh). Proved by tests/comm/test_netlab.c.
set -u
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done   # ssh-style options: none apply
[ $# -ge 2 ] || { echo "netlab-agent: usage: netlab-agent.sh HOST COMMAND..." >&2; exit 2; }
host=$1
shift
exec "$(dirname "${BASH_SOURCE[0]}")/netlab.sh" exec "$host" sh -c "$*"
