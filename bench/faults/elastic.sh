#!/usr/bin/env bash
# elastic.sh — the elastic fault drill: FAULTS runs in a row of a 3-rank data-parallel LeNet job
# (`shoal train -n 3 --elastic 2`), each hit once at a random moment by a random fault on a
# random rank; every run must end (no hang), finish its epochs on the ranks left, redo at most
# one step and pause at most SHOAL_TIMEOUT + 2 s (bench/faults/drill.py; a table at the end).
#
#   bench/faults/elastic.sh                         # FAULTS=50 KINDS=kill,stop, 3 ranks on this machine
#   HOSTS=3 bench/faults/elastic.sh                 # one rank on each of 3 emulated hosts (root),
#                                                   # KINDS=kill,stop,cut: cut = `ip link set down`
#   FAULTS=3 STEPS=60 bench/faults/elastic.sh       # a quick check
#
# Variables: FAULTS (50), KINDS, HOSTS (1 or 3), EPOCHS (1), STEPS (0: EPOCHS), TIMEOUT_MS (5000:
# SHOAL_TIMEOUT), CFG (examples/lenet.cfg), SHOAL_DATA_DIR (Fashion-MNIST), SEED (1), RATE (1gbit),
# RANKS (0,1,2: the ranks a fault may hit).
set -euo pipefail
cd "$(dirname "$0")/../.."
FAULTS=${FAULTS:-50}
HOSTS=${HOSTS:-1}
KINDS=${KINDS:-$([ "$HOSTS" = 3 ] && echo kill,stop,cut || echo kill,stop)}
BUILD=${BUILD:-build}
OUT=${OUT:-bench/out/faults}
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
if [ "$HOSTS" = 3 ]; then
    [ "$(id -u)" = 0 ] || { echo "elastic.sh: HOSTS=3 needs root (network namespaces)" >&2; exit 2; }
    export NETLAB_NAME=${NETLAB_NAME:-bfault}
    trap 'scripts/netlab.sh down >/dev/null 2>&1 || true' EXIT
    scripts/netlab.sh down >/dev/null 2>&1 || true
    scripts/netlab.sh up 3 --rate "${RATE:-1gbit}" >&2
fi
exec env -u OPENBLAS_CORETYPE python3 bench/faults/drill.py --faults "$FAULTS" --kinds "$KINDS" --hosts "$HOSTS" \
    --epochs "${EPOCHS:-1}" --steps "${STEPS:-0}" --timeout-ms "${TIMEOUT_MS:-5000}" --seed "${SEED:-1}" \
    --cfg "${CFG:-examples/lenet.cfg}" --data "${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}" \
    --ranks "${RANKS:-0,1,2}" --shoal "$PWD/$BUILD/shoal" --out "$OUT"
