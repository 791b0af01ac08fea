#!/usr/bin/env bash
# buckets.sh — gradient bucket size (--bucket-mb) against images/s and the share of the
# allreduce hidden behind backward, data-parallel shoal train on 2 ranks, 1 thread each.
#
#   bench/dp/buckets.sh          # REPS=3 STEPS=120 MODELS="mlp-wide lenet" SIZES="0.05 1 4 16 1000"
#
# Sizes are interleaved within each repetition so machine noise hits them alike; medians.
# 1000 MB puts the whole gradient in one bucket: its allreduce starts after backward, so
# nothing is hidden (the no-overlap baseline).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
STEPS=${STEPS:-120}
MODELS=${MODELS:-"mlp-wide lenet"}
SIZES=${SIZES:-"0.05 1 4 16 1000"}
BUILD=${BUILD:-build}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
OUT=bench/out/dp
mkdir -p "$OUT"

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

declare -A IPS HID
for m in $MODELS; do
    for r in $(seq "$REPS"); do
        for b in $SIZES; do
            log="$OUT/buckets-$m-$b.log"
            OPENBLAS_NUM_THREADS=1 "$BUILD/shoal" train "examples/$m.cfg" --data "$DATA" -n 2 --threads 1 \
                --max-steps "$STEPS" --bucket-mb "$b" --json --profile --quiet >"$log" 2>&1 || { echo "failed: $log" >&2; tail -3 "$log" >&2; continue; }
            ips=$(grep -o '"images_per_s":[0-9.]*' "$log" | head -1 | cut -d: -f2)
            hid=$(grep -o '[0-9]*% of it hidden' "$log" | grep -o '^[0-9]*' || echo 0)
            IPS[$m,$b]+="$ips "
            HID[$m,$b]+="$hid "
            echo "  $m bucket $b MB rep $r: $ips img/s, $hid% hidden" >&2
        done
    done
done
echo
echo "bucket size, 2 ranks, weak scaling (batch per rank from the cfg), medians of $REPS runs of $STEPS steps"
printf '%-9s %10s %12s %8s\n' model bucket_MB images/s hidden
for m in $MODELS; do
    for b in $SIZES; do
        printf '%-9s %10s %12.0f %7.0f%%\n' "$m" "$b" "$(echo ${IPS[$m,$b]:-nan} | tr ' ' '\n' | median)" \
            "$(echo ${HID[$m,$b]:-nan} | tr ' ' '\n' | median)"
    done
done
