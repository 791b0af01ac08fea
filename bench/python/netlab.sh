#!/usr/bin/env bash
# netlab.sh — PyTorch across two hosts of the emulated cluster (scripts/netlab.sh, 1 rank per
# host, one thread each): the MLP of examples/mlp-wide.cfg on Fashion-MNIST with
# st.DistributedOptimizer(compression=st.Compression.onebit) against DistributedDataParallel
# with its best built-in hook (fp16_compress_hook), side by side, medians of REPS interleaved
# runs: images/s and test accuracy after EPOCHS epochs.
#
#   env -u OPENBLAS_CORETYPE bench/python/netlab.sh         # REPS=3 RATE=1gbit EPOCHS=2
#   REPS=1 EPOCHS=0.02 bench/python/netlab.sh               # a quick look
#
# Target (issue 32): onebit >= 3x DDP-fp16's images/s, accuracy within 1 point.
# Needs root (network namespaces), python3-torch; MODES overrides "ddp-fp16 st-onebit".
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
RATE=${RATE:-1gbit}
EPOCHS=${EPOCHS:-2}
MODES=${MODES:-"ddp-fp16 st-onebit"}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
. bench/peers.sh
export NETLAB_NAME=bpy
LAB=scripts/netlab.sh
[ "$(id -u)" = 0 ] || { echo "netlab.sh: the emulated cluster needs root (network namespaces)" >&2; exit 2; }
make -s -j2 build/shoal python >&2
trap '$LAB down >/dev/null 2>&1 || true' EXIT
$LAB down >/dev/null 2>&1 || true
$LAB up 2 --rate "$RATE" >&2
export PYTHONPATH=$PWD/build/python OMP_NUM_THREADS=1 SHOAL_THREADS=1
out=$(mktemp)
for rep in $(seq "$REPS"); do
    for mode in $MODES; do
        port=$((29600 + RANDOM % 1000))
        $LAB run 1 --port "$port" -- $PY bench/python/torch_dp.py --rank "$mode" --model mlp --batch 64 \
            --lr 0.01 --data "$DATA" --epochs "$EPOCHS" | grep '^{' >>"$out" || { echo "netlab.sh: $mode failed" >&2; exit 1; }
        echo "rep $rep: $mode done" >&2
    done
done
$PY - "$out" "$RATE" "$EPOCHS" "$REPS" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
modes = sorted({r["mode"] for r in rows})
med = {m: (statistics.median(r["images_per_s"] for r in rows if r["mode"] == m),
           statistics.median(r["accuracy"] for r in rows if r["mode"] == m)) for m in modes}
print("MLP 784-3072-2560-10, Fashion-MNIST, 2 hosts x 1 rank at %s, %s epochs; medians of %s runs" % tuple(sys.argv[2:5]))
print("| mode | images/s | test accuracy |")
print("|---|---:|---:|")
for m in modes:
    print("| %s | %.1f | %.2f%% |" % (m, med[m][0], 100 * med[m][1]))
if "st-onebit" in med and "ddp-fp16" in med:
    print("onebit / ddp-fp16: %.2fx images/s, accuracy %+.2f points" % (
        med["st-onebit"][0] / med["ddp-fp16"][0], 100 * (med["st-onebit"][1] - med["ddp-fp16"][1])))
EOF
rm -f "$out"
