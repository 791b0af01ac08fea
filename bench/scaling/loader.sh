#!/usr/bin/env bash
# loader.sh — the picture loader alone: shoal's (bench_loader.c) beside PyTorch's DataLoader
# over torchvision's ImageFolder, the same transforms (Resize 256, RandomCrop 224, flip,
# Normalize), batch, and number of workers (shoal: decoding threads; torch: worker
# processes), on a folder of JPEGs of 256 x 256 or larger; interleaved, medians of REPS.
#
#   bench/scaling/loader.sh                        # JPEGS=bench/out/scaling/jpegs (made once)
#   REPS=1 STEPS=4 WORKERS="1 2" N=64 bench/scaling/loader.sh     # a quick check
#
# Settings: JPEGS (a folder of class folders or DIR/train; made by make_jpegs.py with N
# pictures when absent), WORKERS="1 2 4", BATCH=32, STEPS=50, WARMUP=5, REPS=3, BUILD=build.
# Output: a table (images/s each, shoal/torch) and bench/out/scaling/loader.svg (shoal plot).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
STEPS=${STEPS:-50}
WARMUP=${WARMUP:-5}
BATCH=${BATCH:-32}
WORKERS=${WORKERS:-"1 2 4"}
N=${N:-2000}
BUILD=${BUILD:-build}
OUT=bench/out/scaling
JPEGS=${JPEGS:-$OUT/jpegs}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
mkdir -p "$OUT"
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" "$BUILD/libshoal.a" >&2
cc -O3 -march=native -Iinclude -Isrc bench/scaling/bench_loader.c "$BUILD/libshoal.a" \
    -ljpeg -lpng -lz -lm -ldl -lrt -pthread -o "$OUT/bench_loader"
[ -d "$JPEGS" ] || $PY bench/scaling/make_jpegs.py "$JPEGS" "$N" 10 $((N / 10)) >&2

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
field() { $PY -c 'import json,sys
for l in sys.stdin:
    if l.startswith("{"): print(json.loads(l).get(sys.argv[1], "nan")); break' "$1"; }

declare -A S T
for w in $WORKERS; do
    s=(); t=()
    for r in $(seq "$REPS"); do
        s+=("$(env -u OPENBLAS_CORETYPE "$OUT/bench_loader" "$JPEGS" "$w" "$BATCH" "$STEPS" "$WARMUP" | field images_per_s)")
        t+=("$(OMP_NUM_THREADS=1 $PY bench/scaling/torch_loader.py "$JPEGS" "$w" "$BATCH" "$STEPS" "$WARMUP" | field images_per_s)")
        echo "  workers $w rep $r: shoal ${s[-1]} img/s, torch ${t[-1]} img/s" >&2
    done
    S[$w]=$(printf '%s\n' "${s[@]}" | median)
    T[$w]=$(printf '%s\n' "${t[@]}" | median)
done

echo
echo "picture loader alone: $JPEGS, batch $BATCH, Resize 256 + RandomCrop 224 + flip + Normalize; medians of $REPS runs of $STEPS batches"
printf '%-8s %14s %14s %12s\n' workers shoal_img/s torch_img/s shoal/torch
: >"$OUT/loader-shoal.jsonl"
: >"$OUT/loader-torch.jsonl"
for w in $WORKERS; do
    printf '%-8s %14.1f %14.1f %12.2f\n' "$w" "${S[$w]}" "${T[$w]}" "$(awk -v a="${S[$w]}" -v b="${T[$w]}" 'BEGIN{print (b>0)?a/b:0}')"
    echo "{\"x\":$w,\"y\":${S[$w]},\"x_label\":\"workers (decoding threads / processes)\",\"y_label\":\"images/s\",\"label\":\"shoal loader\"}" >>"$OUT/loader-shoal.jsonl"
    echo "{\"x\":$w,\"y\":${T[$w]},\"label\":\"torch DataLoader + ImageFolder\"}" >>"$OUT/loader-torch.jsonl"
done
"$BUILD/shoal" plot --bench "$OUT/loader-shoal.jsonl" "$OUT/loader-torch.jsonl" -o "$OUT/loader.svg" >&2
echo "plot: $OUT/loader.svg"
