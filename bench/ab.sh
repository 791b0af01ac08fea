#!/usr/bin/env bash
# ab.sh — the same benchmarks on two builds of shoal, side by side in one run: a change
# that should not move speed (a refactor) is checked against the commit before it.
#
#   bench/ab.sh [BASE_REV]      # BASE_REV (default HEAD~1) is built in a scratch worktree;
#                               # the working tree is built into BUILD (default build)
#   REPS=5 SIZES="8 4096 65536 1048576 16777216 67108864" RANKS="2 4"
#   MODELS="lenet mlp-wide" DP_RANKS=2 STEPS=150 WARMUP=20 THREADS=1 bench/ab.sh a4089e9
#   RANKS= MODELS=lenet THREADS=auto bench/ab.sh   # training only, threads by shoal's own rule
#   LAYOUTS="tensor mlp-wide -n 2 --tensor-parallel 2" RANKS= MODELS= bench/ab.sh  # one layout only
#
# Runs are interleaved (base, new, base, new, ...) so the machine's slow and fast
# stretches hit both alike; every figure is the median of REPS runs. Allreduce: float32
# sum, out of place, busbw in GB/s (nccl-tests' 2(n-1)/n factor) from `shoal bench --json`
# under `shoal launch`; training: images/s of `shoal train -n DP_RANKS` (weak scaling,
# batch 64 per rank, THREADS kernel threads per rank: a number, or auto for no --threads)
# on Fashion-MNIST; layouts: images/s of `shoal train` with each LAYOUTS entry ("name model
# flags", ';' between entries: the pipeline, tensor, hybrid layouts and the parameter server
# by default), the cfg's batch. ratio = new / base (> 1: new is
# faster). Nothing else may run on the machine meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_REV=${1:-HEAD~1}
REPS=${REPS:-5}
SIZES=${SIZES:-"8 4096 65536 1048576 16777216 67108864"}
RANKS=${RANKS-"2 4"}
MODELS=${MODELS-"lenet mlp-wide"}
DP_RANKS=${DP_RANKS:-2}
STEPS=${STEPS:-150}
WARMUP=${WARMUP:-20}
THREADS=${THREADS:-1}
LAYOUTS=${LAYOUTS-"pipeline mlp-wide -n 2 --pipeline 2 --micro-batches 4;tensor mlp-wide -n 2 --tensor-parallel 2;hybrid fc-heavy -n 2 --hybrid broadcast;ps lenet -n 3 --ps"}
BUILD=${BUILD:-build}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
OUT=bench/out/ab
mkdir -p "$OUT"

base_dir=$(mktemp -d /tmp/shoal-ab-XXXXXX)
cleanup() { git worktree remove --force "$base_dir" >/dev/null 2>&1 || rm -rf "$base_dir"; }
trap cleanup EXIT
git worktree add -q --detach "$base_dir" "$BASE_REV"
echo "ab: building base $(git rev-parse --short "$BASE_REV") and the working tree" >&2
make -s -C "$base_dir" -j2 build/shoal >&2
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
declare -A BIN=([base]="$base_dir/build/shoal" [new]="$PWD/$BUILD/shoal")

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
port() { echo $((30000 + RANDOM % 20000)); }

busbw() { # which ranks size -> busbw GB/s of the out-of-place allreduce
    local iters=$(( $3 <= 1048576 ? 300 : 20 ))
    SHOAL_MASTER_PORT=$(port) "${BIN[$1]}" launch -n "$2" "${BIN[$1]}" bench allreduce -b "$3" -e "$3" \
        --iters "$iters" -w $((iters / 10 + 1)) -c 0 --json 2>/dev/null | sed 's/^\[rank 0\] //' |
        $PY -c 'import json,sys
print(json.loads(sys.stdin.read())["rows"][-1]["busbw_gb_s"])' 2>/dev/null || echo nan
}

train_imgs() { # which log model flags... -> images/s (the reporting rank's --json)
    local which=$1 log=$2 model=$3
    shift 3
    local threads=(--threads "$THREADS")
    [ "$THREADS" = auto ] && threads=()
    SHOAL_MASTER_PORT=$(port) OPENBLAS_NUM_THREADS=1 "${BIN[$which]}" train "examples/$model.cfg" --data "$DATA" \
        "$@" "${threads[@]}" --max-steps $((STEPS + WARMUP)) --json --quiet >"$log" 2>&1 || { echo nan; return; }
    $PY -c 'import json,re,sys
for l in sys.stdin:
    l=re.sub(r"^\[rank \d+\] ", "", l.strip())
    if l.startswith("{") and "images_per_s" in l: print(json.loads(l)["images_per_s"]); break
else: print("nan")' <"$log"
}

imgs() { train_imgs "$1" "$OUT/$1-$2.log" "$2" -n "$DP_RANKS"; } # which model -> images/s

declare -A R
for n in $RANKS; do
    for s in $SIZES; do
        for r in $(seq "$REPS"); do
            for w in base new; do R[ar,$n,$s,$w]+="$(busbw "$w" "$n" "$s") "; done
        done
    done
done
for m in $MODELS; do
    for r in $(seq "$REPS"); do
        for w in base new; do R[dp,$m,$w]+="$(imgs "$w" "$m") "; done
    done
done
IFS=';' read -r -a LAYOUT_LIST <<<"$LAYOUTS"
for l in "${LAYOUT_LIST[@]}"; do
    read -r -a a <<<"$l"
    for r in $(seq "$REPS"); do
        for w in base new; do R[ly,${a[0]},$w]+="$(train_imgs "$w" "$OUT/$w-${a[0]}.log" "${a[@]:1}") "; done
    done
done

if [ -n "$RANKS" ]; then
echo
echo "allreduce float32 sum, out of place, busbw GB/s; medians of $REPS interleaved runs"
printf '%5s %10s %10s %10s %7s\n' ranks bytes base new ratio
for n in $RANKS; do
    for s in $SIZES; do
        b=$(printf '%s\n' ${R[ar,$n,$s,base]} | median); x=$(printf '%s\n' ${R[ar,$n,$s,new]} | median)
        awk -v n="$n" -v s="$s" -v b="$b" -v x="$x" 'BEGIN { printf "%5d %10d %10.3f %10.3f %6.2fx\n", n, s, b, x, (b > 0 ? x / b : 0) }'
    done
done
fi
echo
echo "data-parallel training, $DP_RANKS ranks, batch 64 per rank, threads $THREADS; images/s, medians of $REPS"
printf '%-9s %10s %10s %7s\n' model base new ratio
for m in $MODELS; do
    b=$(printf '%s\n' ${R[dp,$m,base]} | median); x=$(printf '%s\n' ${R[dp,$m,new]} | median)
    awk -v m="$m" -v b="$b" -v x="$x" 'BEGIN { printf "%-9s %10.0f %10.0f %6.2fx\n", m, b, x, (b > 0 ? x / b : 0) }'
done
if [ -n "$LAYOUTS" ]; then
echo
echo "layouts, the cfg's batch, threads $THREADS; images/s, medians of $REPS"
printf '%-9s %-10s %10s %10s %7s  %s\n' layout model base new ratio flags
for l in "${LAYOUT_LIST[@]}"; do
    read -r -a a <<<"$l"
    b=$(printf '%s\n' ${R[ly,${a[0]},base]} | median); x=$(printf '%s\n' ${R[ly,${a[0]},new]} | median)
    awk -v n="${a[0]}" -v m="${a[1]}" -v b="$b" -v x="$x" -v f="${a[*]:2}" \
        'BEGIN { printf "%-9s %-10s %10.0f %10.0f %6.2fx  %s\n", n, m, b, x, (b > 0 ? x / b : 0), f }'
done
fi
