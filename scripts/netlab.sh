#!/usr/bin/env bash
# netlab.sh — an emulated cluster on one machine: H "hosts" as network namespaces joined by a
# bridge in a switch namespace, each host's link shaped in both directions with tc tbf.
# Not here: running jobs across it beyond a convenience (docs/netlab.md has the recipes).
# Proved by tests/comm/test_netlab.c.
set -u

usage() {
    cat <<'EOF'
usage: scripts/netlab.sh up H [--rate 1gbit|10gbit|RATE|none] [--burst BYTES]
       scripts/netlab.sh addr HOST            print a host's address (HOST is h0 ... h{H-1})
       scripts/netlab.sh exec HOST CMD...     run CMD inside a host (environment kept,
                                              host name HOST)
       scripts/netlab.sh status               hosts, addresses, rates and bytes sent
       scripts/netlab.sh run R [--port P] -- CMD ARGS...
                                              R ranks of CMD in every host, rank = K*R + local:
                                              shoal's variables (SHOAL_RANK, SHOAL_WORLD_SIZE,
                                              SHOAL_LOCAL_RANK, SHOAL_LOCAL_SIZE, SHOAL_MASTER_ADDR
                                              = h0's address, SHOAL_MASTER_PORT = P, default 29500,
                                              a fresh SHOAL_JOB_KEY) and torchrun's (RANK,
                                              WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
                                              MASTER_PORT, GLOO_SOCKET_IFNAME=eth0); waits for
                                              all, exits with the first rank's failure
       scripts/netlab.sh mpirun ARGS...       Open MPI's mpirun, run inside h0, reaching the
                                              other hosts through scripts/netlab-agent.sh
       scripts/netlab.sh down                 remove the lab's namespaces, bridge and links,
                                              ending what still runs inside them (also after
                                              a crash of up)

Host hK is the namespace shl-NAME-hK with lo and eth0 (address 10.77.0.(K+1)/24); the
bridge lives in shl-NAME-sw, so the lab's traffic never touches the root namespace and
two labs with different names never collide. NAME is $NETLAB_NAME (default "lab"); the
lab's state is in ${NETLAB_DIR:-/run/shoal-netlab}/NAME.

--rate shapes each host's link in both directions (egress of eth0 in the host and of its
port in the switch) with a token bucket (tc tbf); RATE is tc's syntax (500mbit, 1gbit,
10gbit). --burst defaults to RATE/1000 bytes (1 ms of traffic), at least 70000 (one 64 KiB
GSO packet; smaller buckets cut the link's throughput).
This machine's kernel has tbf but not netem: delay, jitter and loss cannot be emulated,
only bandwidth. Needs root and iproute2.
EOF
}

die() { echo "netlab: $*" >&2; exit 1; }
usage_error() { echo "netlab: $*; see scripts/netlab.sh --help" >&2; exit 2; }

name=${NETLAB_NAME:-lab}
[[ $name =~ ^[A-Za-z0-9_]{1,24}$ ]] || usage_error "NETLAB_NAME=$name: use 1 to 24 letters, digits or _"
state=${NETLAB_DIR:-/run/shoal-netlab}/$name
prefix=shl-$name-
sw=${prefix}sw
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

host_index() {
    [[ $1 =~ ^h([0-9]+)$ ]] || die "$1: hosts are named h0, h1, ..."
    local k=${BASH_REMATCH[1]}
    [ -f "$state/hosts" ] || die "lab $name is not up; run scripts/netlab.sh up H first"
    [ "$k" -lt "$(cat "$state/hosts")" ] || die "$1: lab $name has hosts h0 ... h$(( $(cat "$state/hosts") - 1 ))"
    echo "$k"
}
addr_of() { echo "10.77.0.$(( $1 + 1 ))"; }

# Runs a command in host K: its network namespace and a fresh UTS namespace named hK, so
# that what keys on the host name (Open MPI's shared-memory files, log lines) sees hosts.
in_host() {
    local k=$1
    shift
    exec ip netns exec "${prefix}h$k" unshare --uts sh -c 'hostname "$0" && exec "$@"' "h$k" "$@"
}

# tc rate syntax to bits per second (bit, kbit, mbit, gbit, tbit; bps etc. are bytes).
rate_bits() {
    [[ ${1,,} =~ ^([0-9]+)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$ ]] || return 1
    local n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]}
    case $u in
        bit) echo "$n" ;; kbit) echo $((n * 1000)) ;; mbit) echo $((n * 1000000)) ;;
        gbit) echo $((n * 1000000000)) ;; tbit) echo $((n * 1000000000000)) ;;
        bps) echo $((n * 8)) ;; kbps) echo $((n * 8000)) ;; mbps) echo $((n * 8000000)) ;;
        gbps) echo $((n * 8000000000)) ;;
    esac
}

cmd_down() {
    # Namespaces by prefix, not only from the state file: up may have died before writing it.
    local ns
    local -a all=()
    mapfile -t all < <(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}(sw|h[0-9]+)$")
    for ns in "${all[@]}"; do
        # A process left inside would keep the namespace (and its links) alive unnamed.
        local pids
        pids=$(ip netns pids "$ns" 2>/dev/null)
        if [ -n "$pids" ]; then
            kill -TERM $pids 2>/dev/null
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                pids=$(ip netns pids "$ns" 2>/dev/null)
                [ -z "$pids" ] && break
                sleep 0.1
            done
            [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
        fi
        ip netns del "$ns" 2>/dev/null || echo "netlab: could not delete namespace $ns" >&2
    done
    # Links live only inside the lab's namespaces and die with them; nothing is made in the
    # root namespace, so there is nothing to remove there.
    rm -rf "$state"
    rmdir "${state%/*}" 2>/dev/null   # the state root too, once no lab is left
    [ -e "/run/netns/$sw" ] && die "namespace $sw is still there"
    return 0
}

cmd_up() {
    local nhosts=${1:-}
    [[ $nhosts =~ ^[0-9]+$ ]] && [ "$nhosts" -ge 1 ] && [ "$nhosts" -le 250 ] ||
        usage_error "up takes a host count from 1 to 250, not \"$nhosts\""
    shift
    local rate=1gbit burst=
    while [ $# -gt 0 ]; do
        case $1 in
            --rate) [ $# -ge 2 ] || usage_error "--rate needs a value"; rate=$2; shift 2 ;;
            --burst) [ $# -ge 2 ] || usage_error "--burst needs a value"; burst=$2; shift 2 ;;
            *) usage_error "up: unknown option $1" ;;
        esac
    done
    local bits=0
    if [ "$rate" != none ]; then
        bits=$(rate_bits "$rate") || usage_error "--rate $rate: use none or tc's syntax (500mbit, 1gbit, 10gbit)"
        if [ -z "$burst" ]; then
            burst=$((bits / 8 / 1000))
            # A 64 KiB GSO packet and its headers must fit: tbf cuts larger ones into MTU-sized
            # packets, and the link then runs far below its rate (0.03 GB/s at 1 gbit with 15000).
            [ "$burst" -ge 70000 ] || burst=70000
        fi
        [[ $burst =~ ^[0-9]+$ ]] || usage_error "--burst $burst: give bytes"
    fi
    [ "$(id -u)" = 0 ] || die "up needs root (network namespaces, tc)"
    command -v ip >/dev/null && command -v tc >/dev/null || die "up needs iproute2 (ip, tc)"
    if [ -d "$state" ] || [ -e "/run/netns/$sw" ]; then
        die "lab $name is already up (or left by a crash); run scripts/netlab.sh down first, or pick another NETLAB_NAME"
    fi
    mkdir -p "$state" || die "cannot make $state"
    # Written first: a crash from here on leaves state that down finds.
    echo "$nhosts" >"$state/hosts"
    echo "$rate" >"$state/rate"
    echo "${burst:-0}" >"$state/burst"
    local fail=
    step() { "$@" 2>"$state/err" || { fail="$*: $(cat "$state/err")"; return 1; }; }
    step ip netns add "$sw" && step ip -n "$sw" link set lo up &&
        step ip -n "$sw" link add br0 type bridge && step ip -n "$sw" link set br0 up
    local k
    [ -n "$fail" ] && nhosts=0
    for ((k = 0; k < nhosts; k++)); do
        local h=${prefix}h$k
        step ip netns add "$h" &&
            step ip -n "$h" link set lo up &&
            step ip -n "$h" link add eth0 type veth peer name h$k netns "$sw" &&
            step ip -n "$h" addr add "$(addr_of $k)/24" dev eth0 &&
            step ip -n "$h" link set eth0 up &&
            step ip -n "$sw" link set "h$k" master br0 &&
            step ip -n "$sw" link set "h$k" up || break
        if [ "$rate" != none ]; then
            # host -> switch on eth0, switch -> host on the switch's port
            step tc -n "$h" qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms &&
                step tc -n "$sw" qdisc add dev "h$k" root tbf rate "$rate" burst "$burst" latency 50ms || break
        fi
    done
    rm -f "$state/err"
    if [ -n "$fail" ]; then
        cmd_down
        die "up failed at: $fail (everything made so far was removed)"
    fi
    echo "netlab: lab $name up: $nhosts hosts h0 ... h$((nhosts - 1)) at 10.77.0.1 ... $(addr_of $((nhosts - 1))), rate $rate${burst:+, burst $burst bytes}"
}

cmd_status() {
    [ -f "$state/hosts" ] || { echo "netlab: lab $name is not up"; return 1; }
    local n rate k
    n=$(cat "$state/hosts"); rate=$(cat "$state/rate")
    echo "lab $name: $n hosts, rate $rate, burst $(cat "$state/burst") bytes, switch namespace $sw"
    for ((k = 0; k < n; k++)); do
        local sent_up sent_down
        sent_up=$(ip -n "${prefix}h$k" -s link show eth0 2>/dev/null | awk '/TX:/{getline; print $1; exit}')
        sent_down=$(ip -n "${prefix}h$k" -s link show eth0 2>/dev/null | awk '/RX:/{getline; print $1; exit}')
        printf 'h%-3d %-12s namespace %-20s rate %-8s sent %s B, received %s B\n' "$k" "$(addr_of $k)" \
            "${prefix}h$k" "$rate" "${sent_up:-?}" "${sent_down:-?}"
    done
}

cmd_run() {
    local r=${1:-} port=29500
    [[ $r =~ ^[0-9]+$ ]] && [ "$r" -ge 1 ] || usage_error "run takes ranks per host, not \"$r\""
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        case $1 in
            --port) [ $# -ge 2 ] || usage_error "--port needs a value"; port=$2; shift 2 ;;
            *) usage_error "run: unknown option $1" ;;
        esac
    done
    [ $# -ge 2 ] || usage_error "run R [--port P] -- CMD ARGS..."
    shift
    [ -f "$state/hosts" ] || die "lab $name is not up"
    local n key k l pids=() rc=0
    n=$(cat "$state/hosts")
    key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
    for ((k = 0; k < n; k++)); do
        for ((l = 0; l < r; l++)); do
            (in_host "$k" env SHOAL_RANK=$((k * r + l)) SHOAL_WORLD_SIZE=$((n * r)) \
                SHOAL_LOCAL_RANK=$l SHOAL_LOCAL_SIZE="$r" SHOAL_MASTER_ADDR="$(addr_of 0)" \
                SHOAL_MASTER_PORT="$port" SHOAL_JOB_KEY="$key" \
                RANK=$((k * r + l)) WORLD_SIZE=$((n * r)) LOCAL_RANK=$l LOCAL_WORLD_SIZE="$r" \
                MASTER_ADDR="$(addr_of 0)" MASTER_PORT="$port" GLOO_SOCKET_IFNAME=eth0 "$@") &
            pids+=($!)
        done
    done
    # The first rank to fail ends the job: the others would only wait for it until SHOAL_TIMEOUT.
    local left=${#pids[@]} s done_pid
    while [ "$left" -gt 0 ]; do
        wait -n -p done_pid; s=$?
        [ -z "${done_pid:-}" ] && break
        left=$((left - 1))
        if [ $s -ne 0 ] && [ $rc -eq 0 ]; then
            rc=$s
            echo "netlab: rank $(( $(printf '%s\n' "${pids[@]}" | grep -nx "$done_pid" | cut -d: -f1) - 1 )) exited with $s; stopping the others" >&2
            kill -TERM "${pids[@]}" 2>/dev/null
        fi
    done
    return $rc
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
    up) cmd_up "$@" ;;
    down) [ $# -eq 0 ] || usage_error "down takes no arguments"; cmd_down ;;
    addr) [ $# -eq 1 ] || usage_error "addr HOST"; k=$(host_index "$1") || exit 1; addr_of "$k" ;;
    exec)
        [ $# -ge 2 ] || usage_error "exec HOST CMD..."
        k=$(host_index "$1") || exit 1; shift
        in_host "$k" "$@" ;;
    status) cmd_status ;;
    run) cmd_run "$@" ;;
    mpirun)
        [ -f "$state/hosts" ] || die "lab $name is not up"
        command -v mpirun >/dev/null || die "mpirun not found; install openmpi-bin"
        # mpirun itself runs in h0 so that every orted it starts can reach it on the lab's
        # network; eth0 is the lab's interface in every host.
        in_host 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            NETLAB_NAME="$name" NETLAB_DIR="${NETLAB_DIR:-/run/shoal-netlab}" \
            mpirun --mca plm_rsh_agent "$here/netlab-agent.sh" --mca btl tcp,self,vader \
            --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 "$@" ;;
    -h|--help|help) usage ;;
    '') usage >&2; exit 2 ;;
    *) usage_error "unknown command $cmd" ;;
esac
