#!/usr/bin/env bash
# run.sh — Darknet's model zoo at batch 1: forward milliseconds of `shoal time` beside
# Darknet's own timing path (`darknet speed CFG N`: parse, set batch 1, N network_predict
# calls, "Speed: S sec/eval") on the same machine, in one run, interleaved per model and
# repetition, medians of REPS runs, and the ratio darknet/shoal (> 1: shoal is faster).
#
#   bench/zoo/run.sh                              # every classification model in the zoo
#   MODELS="tiny darknet" REPS=1 ITERS=2 bench/zoo/run.sh   # a quick check
#
# Settings: MODELS (names under ZOO, default all classification cfgs), REPS=3, ITERS=10
# (timed forwards per run; shoal adds 2 untimed warm-up ones, Darknet's figure includes its
# first, cold, forward), THREADS=1 (shoal --threads; OMP_NUM_THREADS and
# OPENBLAS_NUM_THREADS for Darknet), BUILD=build, ZOO=/usr/share/darknet/cfg.
# Both run each cfg as Darknet ships it, with batch=1 (shoal: --batch 1; Darknet: speed sets
# batch 1). darknet9000 is left out: shoal refuses its hierarchical softmax (tree=).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
ITERS=${ITERS:-10}
THREADS=${THREADS:-1}
BUILD=${BUILD:-build}
ZOO=${ZOO:-/usr/share/darknet/cfg}
MODELS=${MODELS:-"tiny darknet cifar cifar.test jnet-conv go go.test resnet18 resnet34 resnet50
resnet101 resnet152 resnext50 resnext101-32x4d resnext152-32x4d darknet19 darknet19_448
darknet53 darknet53_448 densenet201 extraction extraction.conv extraction22k alexnet strided
vgg-conv vgg-16"}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)

make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$BUILD/shoal"
DARKNET=$(command -v darknet || true)
[ -z "$DARKNET" ] && echo "darknet: not installed (apt-get install darknet); its column is left out" >&2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

for rep in $(seq "$REPS"); do
    for m in $MODELS; do
        echo "rep $rep/$REPS: $m" >&2
        "$SHOAL" time "$ZOO/$m.cfg" --batch 1 --iterations "$ITERS" --threads "$THREADS" --json \
            | $PY -c "import json,sys; print(json.load(sys.stdin)['forward_ms'])" >>"$tmp/shoal.$m"
        if [ -n "$DARKNET" ]; then
            OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS "$DARKNET" speed "$ZOO/$m.cfg" "$ITERS" 2>/dev/null \
                | awk '/sec\/eval/ {printf "%.4f\n", $2 * 1000}' >>"$tmp/darknet.$m"
        fi
    done
done

echo "zoo forward at batch 1: medians of $REPS runs, $ITERS forwards each, $THREADS thread(s), $(nproc) cores"
printf "%-18s %12s %12s %14s\n" model shoal_ms darknet_ms darknet/shoal
for m in $MODELS; do
    s=$(median <"$tmp/shoal.$m")
    d=$( [ -f "$tmp/darknet.$m" ] && median <"$tmp/darknet.$m" || echo nan)
    r=$(awk -v s="$s" -v d="$d" 'BEGIN { if (s > 0 && d == d + 0) printf "%.2fx", d / s; else print "-" }')
    printf "%-18s %12.2f %12s %14s\n" "$m" "$s" "$d" "$r"
done
