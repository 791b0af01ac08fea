#!/usr/bin/env bash
# run.sh — parameter-server training against shoal's allreduce strategy, side by side in one
# run: LeNet on Fashion-MNIST, EPOCHS epochs (default 2), batch 64 per worker, 1 thread per
# rank; 1 server + 2 workers and 2 servers + 4 workers (oversubscribed on 2 cores); sync,
# async and ssp (s = 3), and data-parallel allreduce over the same workers. Then one worker
# slowed to a third of its speed (--debug-delay-ms): the throughput each mode keeps.
#
#   bench/ps/run.sh            # EPOCHS=2 SLOW_MS=30 TOPOLOGIES="1:2 2:4"
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCHS=${EPOCHS:-2}
SLOW_MS=${SLOW_MS:-30}
TOPOLOGIES=${TOPOLOGIES:-"1:2 2:4"}
BUILD=${BUILD:-build}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
PY=/usr/bin/python3
OUT=bench/out/ps
mkdir -p "$OUT"
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$BUILD/shoal"

field() { sed -n 's/^\[rank [0-9]*\] {/{/p' "$1" | head -1 | $PY -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$2"; }
server_line() { grep -o 'server 0 (.*' "$1" | head -1 || true; }

run() { # name log args...
    local name=$1 log="$OUT/$2.log"; shift 2
    OPENBLAS_NUM_THREADS=1 "$SHOAL" train examples/lenet.cfg --data "$DATA" --threads 1 --epochs "$EPOCHS" --json "$@" >"$log" 2>&1 || {
        echo "$name failed: $log" >&2; tail -3 "$log" >&2; }
    printf '%-28s %10s img/s  accuracy %s%%   %s\n' "$name" "$(field "$log" images_per_s)" \
        "$($PY -c "print(round(100*float('$(field "$log" accuracy)'),2))" 2>/dev/null)" "$(server_line "$log")"
}

echo "LeNet, Fashion-MNIST, $EPOCHS epochs, batch 64 per worker, 1 thread per rank"
for topo in $TOPOLOGIES; do
    S=${topo%%:*}; W=${topo##*:}
    echo "-- $S server(s), $W workers"
    run "allreduce, $W ranks" "ar-$W" -n "$W"
    for mode in sync async ssp; do
        run "ps $mode, ${S}s/${W}w" "ps-$mode-$S-$W" --ps --servers "$S" -n "$W" --consistency "$mode" --staleness 3
    done
done
echo "-- one of 2 workers slowed by ${SLOW_MS} ms per step (1 server)"
for mode in sync async ssp; do
    run "ps $mode, slowed worker" "slow-$mode" --ps --servers 1 -n 2 --consistency "$mode" --staleness 3 \
        --debug-delay-rank 1 --debug-delay-ms "$SLOW_MS"
done
