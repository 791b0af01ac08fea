#!/usr/bin/env bash
# tp_vs.sh — --tensor-parallel 2 on mlp-wide beside one rank and beside PyTorch's tensor
# parallelism wired by hand over gloo (bench/mp/torch_mp.py), one thread per rank,
# interleaved rounds, medians:
#   bench/mp/tp_vs.sh                          # REPS=5 STEPS=40 TORCH=1
#   BASE=/tmp/old/shoal TORCH=0 bench/mp/tp_vs.sh   # another shoal binary beside (a before)
# PyTorch's OpenBLAS kernels come from the CPU's flags as shoal's do (bench/peers.sh): where
# the system's OpenBLAS (0.3.21) does not know the CPU it would fall back to Prescott's.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-5}
STEPS=${STEPS:-40}
TORCH=${TORCH:-1}
BUILD=${BUILD:-build}
MODEL=${MODEL:-examples/mlp-wide.cfg}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
bins=("$PWD/$BUILD/shoal")
[ -n "${BASE:-}" ] && bins+=("$BASE")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ips() { sed -n 's/.*"images_per_s": \{0,1\}\([0-9.]*\).*/\1/p' | head -1; }
median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) printf "%.0f\n", v[(NR + 1) / 2]; else printf "%.0f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
shoal_run() { # binary args... -> images/s
    local b=$1; shift
    OPENBLAS_NUM_THREADS=1 "$b" train "$MODEL" --data "$DATA" --threads 1 --max-steps "$STEPS" \
        --json --quiet "$@" 2>&1 | ips
}
for r in $(seq "$REPS"); do
    for i in "${!bins[@]}"; do
        shoal_run "${bins[$i]}" >>"$tmp/one.$i"
        shoal_run "${bins[$i]}" -n 2 --tensor-parallel 2 >>"$tmp/tp.$i"
    done
    if [ "$TORCH" = 1 ]; then
        m=$(basename "$MODEL" .cfg)
        "$PY" bench/mp/torch_mp.py --mode tp --model "$m" --nranks 2 --batch 64 --steps "$STEPS" 2>/dev/null |
            ips >>"$tmp/ttp"
        OPENBLAS_NUM_THREADS=1 "$PY" bench/mp/torch_mp.py --mode one --model "$m" --threads 1 --batch 64 \
            --steps "$STEPS" 2>/dev/null | ips >>"$tmp/tone"
    fi
    echo "round $r done" >&2
done
echo "$(basename "$MODEL"), 1 thread per rank, medians of $REPS rounds of $STEPS steps, images/s"
for i in "${!bins[@]}"; do
    o=$(median <"$tmp/one.$i"); t=$(median <"$tmp/tp.$i")
    printf '%-40s one rank %8s  tensor parallel 2 %8s  (%sx)\n' "${bins[$i]}" "$o" "$t" \
        "$(awk -v a="$t" -v b="$o" 'BEGIN {printf "%.2f", a / b}')"
done
if [ "$TORCH" = 1 ]; then
    o=$(median <"$tmp/tone"); t=$(median <"$tmp/ttp"); s=$(median <"$tmp/tp.0")
    printf '%-40s one rank %8s  tensor parallel 2 %8s  (%sx)\n' "PyTorch (gloo, by hand)" "$o" "$t" \
        "$(awk -v a="$t" -v b="$o" 'BEGIN {printf "%.2f", a / b}')"
    echo "shoal / PyTorch, tensor parallel: $(awk -v a="$s" -v b="$t" 'BEGIN {printf "%.2f", a / b}')x"
fi
