#!/usr/bin/env bash
# flap.sh — link flaps under a running allreduce on the emulated cluster (scripts/netlab.sh):
# ROUNDS rounds of 2 hosts x 2 ranks of `shoal bench allreduce` (SIZE, ITERS iterations,
# SHOAL_TIMEOUT 15 s), each cut FLAPS times by `ip link set h1 down`, DOWN seconds, `up`.
# Prints each round's exit codes and seconds; a failed round keeps its ranks' logs and an
# `ss -tinm` of both hosts taken SS_AFTER seconds after the last flap under $OUT/round-N/.
#
#   ROUNDS=40 FLAPS=2 DOWN=1.5 SIZE=4M ITERS=100 CC=system bench/net/flap.sh
#
# CC is SHOAL_TCP_CONGESTION for the ranks (system: the kernel's default). bench/README.md,
# "BBR after a link flap", has what it found. Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-40}
FLAPS=${FLAPS:-2}
DOWN=${DOWN:-1.5}
SIZE=${SIZE:-4M}
ITERS=${ITERS:-100}
CC=${CC:-system}
SS_AFTER=${SS_AFTER:-6}
OUT=${OUT:-bench/out/flap}
[ "$(id -u)" = 0 ] || { echo "flap.sh: the emulated cluster needs root (network namespaces)" >&2; exit 2; }
make -s -j2 build/shoal >&2
SHOAL=$PWD/build/shoal
export NETLAB_NAME=bflap
LAB=scripts/netlab.sh
mkdir -p "$OUT"
trap '$LAB down >/dev/null 2>&1 || true' EXIT
$LAB down >/dev/null 2>&1 || true
$LAB up 2 --rate 1gbit >/dev/null
sw=shl-$NETLAB_NAME-sw
failed=0
for ((i = 1; i <= ROUNDS; i++)); do
    port=$((30000 + RANDOM % 20000))
    key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
    pids=()
    for r in 0 1 2 3; do
        SHOAL_RANK=$r SHOAL_WORLD_SIZE=4 SHOAL_LOCAL_RANK=$((r % 2)) SHOAL_LOCAL_SIZE=2 \
            SHOAL_MASTER_ADDR="$($LAB addr h0)" SHOAL_MASTER_PORT=$port SHOAL_JOB_KEY=$key SHOAL_TIMEOUT=15000 \
            SHOAL_TCP_CONGESTION=$CC $LAB exec h$((r / 2)) "$SHOAL" bench allreduce -b "$SIZE" -e "$SIZE" \
            --iters "$ITERS" -w 2 -c 1 >"$OUT/rank$r.log" 2>&1 &
        pids+=($!)
    done
    t0=$(date +%s.%N)
    for ((f = 0; f < FLAPS; f++)); do
        sleep 2
        ip -n "$sw" link set h1 down
        sleep "$DOWN"
        ip -n "$sw" link set h1 up
    done
    (sleep "$SS_AFTER"; for h in 0 1; do echo "== h$h"; $LAB exec h$h ss -tinm; done >"$OUT/ss.txt" 2>&1) &
    ss_pid=$!
    rc=""
    for p in "${pids[@]}"; do
        if wait "$p"; then rc="$rc 0"; else rc="$rc $?"; fi
    done
    wait "$ss_pid" || true
    took=$(echo "$(date +%s.%N) - $t0" | bc)
    echo "round $i: exit$rc, ${took%.*} s"
    if [ "$rc" != " 0 0 0 0" ]; then
        failed=$((failed + 1))
        mkdir -p "$OUT/round-$i"
        cp "$OUT"/rank?.log "$OUT/ss.txt" "$OUT/round-$i/"
    fi
done
echo "flap.sh: $failed of $ROUNDS rounds failed (CC=$CC, $FLAPS flaps of $DOWN s a round, $SIZE)"
