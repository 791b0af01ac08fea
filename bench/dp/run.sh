#!/usr/bin/env bash
# run.sh — data-parallel training, shoal against PyTorch DistributedDataParallel (gloo),
# side by side in one run, medians of REPS runs, interleaved so machine noise hits both.
#
#   bench/dp/run.sh              # from anywhere; REPS=3 STEPS=200 WARMUP=20 MODELS="lenet mlp-wide"
#                                # RANKS="1 2 4" (LeNet) WIDE_RANKS="1 2" (mlp-wide) ACC=1
#
# Weak scaling: every rank trains on 64 Fashion-MNIST images per step with 1 thread; 1, 2
# and 4 ranks (4 is oversubscribed on 2 cores). Reports aggregate images/s, scaling
# efficiency (images/s at N ranks / (N x images/s at 1 rank)), shoal/PyTorch ratios, and
# from shoal --profile the share of allreduce time hidden behind backward. ACC=1 adds the
# accuracy check: one epoch of LeNet on 2 ranks (weak, global batch 128) against 1 rank
# with batch 128. PRIVATE=1 adds shoal with a copy of the weights per rank (SHOAL_DP_WINDOW=0)
# on the multi-rank rows, to show what the one shared copy gives.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
MODELS=${MODELS:-"lenet mlp-wide"}
RANKS=${RANKS:-"1 2 4"}
WIDE_RANKS=${WIDE_RANKS:-"1 2"}  # mlp-wide: 4 oversubscribed ranks of PyTorch take minutes a run
BUILD=${BUILD:-build}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$BUILD/shoal"
OUT=bench/out/dp
mkdir -p "$OUT"

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
json_field() { $PY -c 'import json,sys
for line in sys.stdin:
    line=line.strip()
    if line.startswith("[rank 0] "): line=line[9:]
    if line.startswith("{"):
        print(json.loads(line)[sys.argv[1]]); break' "$1"; }

shoal_run() { # model ranks [SHOAL_DP_WINDOW] -> images/s ; writes the profile line to $OUT
    local m=$1 n=$2 log="$OUT/shoal-$1-$2${3:+-w$3}.log"
    SHOAL_DP_WINDOW=${3:-1} OPENBLAS_NUM_THREADS=1 "$SHOAL" train "examples/$m.cfg" --data "$DATA" -n "$n" --threads 1 \
        --max-steps $((STEPS + WARMUP)) --json --profile --quiet >"$log" 2>&1 || { echo "shoal failed: $log" >&2; tail -3 "$log" >&2; echo nan; return; }
    json_field images_per_s <"$log"
}
torch_run() {
    local m=$1 n=$2 log="$OUT/torch-$1-$2.log"
    OPENBLAS_NUM_THREADS=1 $PY bench/dp/torch_ddp.py --model "$m" --nranks "$n" --steps "$STEPS" \
        --warmup "$WARMUP" --data "$DATA" --port $((29600 + RANDOM % 300)) >"$log" 2>&1 || { echo "torch failed: $log" >&2; echo nan; return; }
    json_field images_per_s <"$log"
}

declare -A S T H P
for m in $MODELS; do
    ranks=$RANKS
    [ "$m" = mlp-wide ] && ranks=$WIDE_RANKS
    for n in $ranks; do
        s_list=(); t_list=(); h_list=(); p_list=()
        for r in $(seq "$REPS"); do
            s_list+=("$(shoal_run "$m" "$n")")
            h_list+=("$(grep -o '[0-9]*% of it hidden' "$OUT/shoal-$m-$n.log" | grep -o '^[0-9]*' || echo 0)")
            t_list+=("$(torch_run "$m" "$n")")
            extra=
            if [ "${PRIVATE:-0}" = 1 ] && [ "$n" -gt 1 ]; then
                p_list+=("$(shoal_run "$m" "$n" 0)")
                extra=", shoal with private weights ${p_list[-1]} img/s"
            fi
            echo "  $m x$n rep $r: shoal ${s_list[-1]} img/s, torch ${t_list[-1]} img/s$extra" >&2
        done
        S[$m,$n]=$(printf '%s\n' "${s_list[@]}" | median)
        T[$m,$n]=$(printf '%s\n' "${t_list[@]}" | median)
        H[$m,$n]=$(printf '%s\n' "${h_list[@]}" | median)
        [ ${#p_list[@]} -gt 0 ] && P[$m,$n]=$(printf '%s\n' "${p_list[@]}" | median)
    done
done

echo
echo "data-parallel training, weak scaling, batch 64 per rank, 1 thread per rank; medians of $REPS runs ($STEPS steps after $WARMUP)"
printf '%-9s %5s %12s %12s %8s %10s %10s %8s\n' model ranks shoal_img/s torch_img/s ratio shoal_eff torch_eff hidden
for m in $MODELS; do
    ranks=$RANKS
    [ "$m" = mlp-wide ] && ranks=$WIDE_RANKS
    for n in $ranks; do
        awk -v m="$m" -v n="$n" -v s="${S[$m,$n]}" -v t="${T[$m,$n]}" -v s1="${S[$m,1]:-nan}" -v t1="${T[$m,1]:-nan}" -v h="${H[$m,$n]}" \
            'BEGIN { printf "%-9s %5d %12.0f %12.0f %7.2fx %9.0f%% %9.0f%% %7s%%\n", m, n, s, t, s/t, 100*s/(n*s1), 100*t/(n*t1), h }'
    done
done
if [ "${PRIVATE:-0}" = 1 ]; then
    echo
    echo "shoal with a copy of the weights per rank (SHOAL_DP_WINDOW=0) against the shared copy (default)"
    printf '%-9s %5s %14s %14s %8s %12s\n' model ranks private_img/s shared_img/s shared/private private_eff
    for k in "${!P[@]}"; do
        m=${k%,*} n=${k#*,}
        awk -v m="$m" -v n="$n" -v p="${P[$k]}" -v s="${S[$k]}" -v s1="${S[$m,1]:-nan}" \
            'BEGIN { printf "%-9s %5d %14.0f %14.0f %13.2fx %11.0f%%\n", m, n, p, s, s/p, 100*p/(n*s1) }'
    done | sort
fi

if [ "${ACC:-0}" = 1 ]; then
    echo
    a2=$("$SHOAL" train examples/lenet.cfg --data "$DATA" -n 2 --epochs 1 --json --quiet 2>/dev/null | json_field accuracy)
    a1=$("$SHOAL" train examples/lenet.cfg --data "$DATA" --batch 128 --epochs 1 --json --quiet 2>/dev/null | json_field accuracy)
    awk -v a="$a2" -v b="$a1" 'BEGIN { printf "LeNet, one epoch, global batch 128: 2 ranks x 64 %.2f%%, 1 rank x 128 %.2f%% (difference %.2f points)\n", 100*a, 100*b, 100*(a-b) }'
fi
