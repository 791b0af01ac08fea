#!/usr/bin/env bash
# lenet_solver.sh — Caffe's LeNet example as Caffe runs it (examples/caffe/lenet_solver.prototxt:
# 10000 iterations of batch 64, lr_policy inv, momentum 0.9, weight_decay 0.0005; Data layers
# reading Fashion-MNIST) beside shoal's own LeNet (examples/lenet.cfg, its 4685 steps), on
# Fashion-MNIST (dataset-fashion-mnist): test accuracy at the end, medians of REPS seeds, and
# the difference (the issue asks the Caffe solver for at least the .cfg LeNet's accuracy).
#   bench/caffe/lenet_solver.sh
#   REPS=1 STEPS=200 bench/caffe/lenet_solver.sh       # a quick check (both cut at STEPS)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
THREADS=${THREADS:-2}
BUILD=${BUILD:-build}
STEPS=${STEPS:-}
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
tmp=$(mktemp -d /tmp/shoal_lenet_solver_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
limit=${STEPS:+--max-steps $STEPS}
acc() { sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p' | head -1; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
: >"$tmp/caffe" && : >"$tmp/cfg"
for seed in $(seq 1 "$REPS"); do
    # shellcheck disable=SC2086 # $limit is empty or two words
    env -u OPENBLAS_CORETYPE SHOAL_LOG=error "$BUILD/shoal" train examples/caffe/lenet_solver.prototxt --seed "$seed" \
        --threads "$THREADS" --save "$tmp/c.ckpt" $limit --json --quiet | acc >>"$tmp/caffe"
    # shellcheck disable=SC2086
    env -u OPENBLAS_CORETYPE SHOAL_LOG=error "$BUILD/shoal" train examples/lenet.cfg --seed "$seed" \
        --threads "$THREADS" $limit --json --quiet | acc >>"$tmp/cfg"
done
c=$(median <"$tmp/caffe")
d=$(median <"$tmp/cfg")
printf "%-44s %10s\n" "model (Fashion-MNIST, median of $REPS seeds)" "accuracy"
printf "%-44s %9.2f%%\n" "examples/caffe/lenet_solver.prototxt" "$(echo "$c * 100" | bc -l)"
printf "%-44s %9.2f%%\n" "examples/lenet.cfg" "$(echo "$d * 100" | bc -l)"
printf "%-44s %+9.2f points\n" "Caffe solver - .cfg" "$(echo "($c - $d) * 100" | bc -l)"
