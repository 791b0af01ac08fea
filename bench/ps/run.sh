#!/usr/bin/env bash
# run.sh — parameter-server training against shoal's allreduce strategy, side by side in one
# run: LeNet on Fashion-MNIST, EPOCHS epochs (default 2), batch 64 per worker, 1 thread per
# rank; 1 server + 2 workers and 2 servers + 4 workers (oversubscribed on 2 cores); sync,
# async and ssp (s = 3), and data-parallel allreduce over the same workers. Then one worker
# slowed to a third of its speed (--debug-delay-ms): the throughput each mode loses against
# its own unslowed 1 server + 2 workers run, and against the unslowed sync run (one baseline
# for all three).
#
#   bench/ps/run.sh            # EPOCHS=2 SLOW_MS=30 TOPOLOGIES="1:2 2:4"
#   MAX_STEPS=40 bench/ps/run.sh   # a quick check of the script: 40 steps per run, not epochs
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCHS=${EPOCHS:-2}
MAX_STEPS=${MAX_STEPS:-}
SLOW_MS=${SLOW_MS:-30}
TOPOLOGIES=${TOPOLOGIES:-"1:2 2:4"}
BUILD=${BUILD:-build}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
OUT=bench/out/ps
mkdir -p "$OUT"
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$BUILD/shoal"
if [ -n "$MAX_STEPS" ]; then LENGTH=(--max-steps "$MAX_STEPS"); SPAN="$MAX_STEPS steps"
else LENGTH=(--epochs "$EPOCHS"); SPAN="$EPOCHS epochs"; fi

field() { sed -n 's/^\(\[rank [0-9]*\] \)\{0,1\}{/{/p' "$1" | head -1 | $PY -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$2" 2>/dev/null || echo "?"; }
server_line() { grep -o 'server 0 (.*' "$1" | head -1 || true; }

IPS=?
run() { # name log args...  (sets IPS to the run's images/s, "?" when it failed)
    local name=$1 log="$OUT/$2.log"; shift 2
    OPENBLAS_NUM_THREADS=1 "$SHOAL" train examples/lenet.cfg --data "$DATA" --threads 1 "${LENGTH[@]}" --json "$@" >"$log" 2>&1 || {
        echo "$name failed: $log" >&2; tail -3 "$log" >&2; }
    IPS=$(field "$log" images_per_s)
    printf '%-28s %10s img/s  accuracy %s%%   %s\n' "$name" "$IPS" \
        "$($PY -c "print(round(100*float('$(field "$log" accuracy)'),2))" 2>/dev/null)" "$(server_line "$log")"
}

# loss FAST SLOW: "loses N%", the share of FAST's images/s that SLOW lost ("gains N%" when
# SLOW was faster, noise on short runs; "loses ?" when a run failed)
loss() { $PY -c 'import sys
try: d = 100 * (1 - float(sys.argv[2]) / float(sys.argv[1]))
except (ValueError, ZeroDivisionError): print("loses ?"); sys.exit()
print("%s %.0f%%" % ("loses" if d >= 0 else "gains", abs(d)))' "$1" "$2"; }

declare -A BASE
echo "LeNet, Fashion-MNIST, $SPAN, batch 64 per worker, 1 thread per rank"
for topo in $TOPOLOGIES; do
    S=${topo%%:*}; W=${topo##*:}
    echo "-- $S server(s), $W workers"
    run "allreduce, $W ranks" "ar-$W" -n "$W"
    for mode in sync async ssp; do
        run "ps $mode, ${S}s/${W}w" "ps-$mode-$S-$W" --ps --servers "$S" -n "$W" --consistency "$mode" --staleness 3
        BASE[$mode-$S-$W]=$IPS
    done
done
echo "-- one of 2 workers slowed by ${SLOW_MS} ms per step (1 server)"
SUMMARY=""
COMMON=""
for mode in sync async ssp; do
    if [ -z "${BASE[$mode-1-2]:-}" ]; then # TOPOLOGIES without 1:2: the unslowed run first
        run "ps $mode, 1s/2w" "ps-$mode-1-2" --ps --servers 1 -n 2 --consistency "$mode" --staleness 3
        BASE[$mode-1-2]=$IPS
    fi
    run "ps $mode, slowed worker" "slow-$mode" --ps --servers 1 -n 2 --consistency "$mode" --staleness 3 \
        --debug-delay-rank 1 --debug-delay-ms "$SLOW_MS"
    SUMMARY+="${SUMMARY:+, }$mode $(loss "${BASE[$mode-1-2]}" "$IPS")"
    COMMON+="${COMMON:+, }$mode $(loss "${BASE[sync-1-2]}" "$IPS")"
done
echo "throughput lost to the slowed worker (against the same mode unslowed, 1s/2w): $SUMMARY"
echo "throughput lost to the slowed worker (against unslowed sync, 1s/2w): $COMMON"
