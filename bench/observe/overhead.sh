#!/usr/bin/env bash
# overhead.sh — the cost of watching: data-parallel training with --timeline and --logdir
# (scalars every step, histograms every HIST steps) against the same training without them,
# side by side in one run, interleaved (the order alternates each repetition so machine
# noise and warm caches hit both alike), medians of REPS runs, and their ratio.
#
#   bench/observe/overhead.sh     # REPS=5 STEPS=300 WARMUP=30 RANKS="1 2" MODELS="lenet mlp"
#                                 # HIST=100 THREADS=1 BUILD=build
#
# images/s is `shoal train --json`'s steady-state figure (steps after the warm-up). The
# issue's goal: the watched run within 3% of the plain one (ratio >= 0.97). Results:
# bench/out/observe/rows.txt (one line per run) and the table on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-5}
STEPS=${STEPS:-300}
WARMUP=${WARMUP:-30}
RANKS=${RANKS:-"1 2"}
MODELS=${MODELS:-"lenet mlp"}
HIST=${HIST:-100}
THREADS=${THREADS:-1}
BUILD=${BUILD:-build}
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$BUILD/shoal"
OUT=bench/out/observe
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
: >"$OUT/rows.txt"

# one training run; prints its images/s
run() { # model ranks mode
    local model=$1 n=$2 mode=$3 extra=()
    if [ "$mode" = watched ]; then
        rm -rf "$TMP/log" "$TMP/trace.json"
        extra=(--timeline "$TMP/trace.json" --logdir "$TMP/log" --log-histograms "$HIST")
    fi
    local ranks=()
    [ "$n" -gt 1 ] && ranks=(-n "$n")
    "$SHOAL" train "examples/$model.cfg" --max-steps $((STEPS + WARMUP)) --batch 64 --threads "$THREADS" \
        --quiet --json "${ranks[@]}" "${extra[@]}" 2>/dev/null |
        sed -n 's/.*"images_per_s":\([0-9.]*\).*/\1/p' | tail -1
}

for rep in $(seq 1 "$REPS"); do
    for model in $MODELS; do
        for n in $RANKS; do
            if [ $((rep % 2)) = 1 ]; then order="plain watched"; else order="watched plain"; fi
            for mode in $order; do
                ips=$(run "$model" "$n" "$mode")
                [ -n "$ips" ] || { echo "overhead.sh: $model -n $n $mode failed" >&2; exit 1; }
                echo "$model $n $mode $ips" >>"$OUT/rows.txt"
                echo "rep $rep: $model ranks $n $mode $ips img/s" >&2
            done
        done
    done
done

awk -v steps="$STEPS" -v reps="$REPS" '
function median(key,   n, i, j, t, v) {
    n = split(vals[key], v, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
{ key = $1 " " $2 " " $3; vals[key] = vals[key] " " $4; seen[$1 " " $2] = 1 }
END {
    printf "overhead of --timeline + --logdir: medians of %d runs, %d steps after the warm-up\n", reps, steps
    printf "%-8s %5s %12s %12s %8s\n", "model", "ranks", "plain_img/s", "watched", "ratio"
    for (k in seen) {
        p = median(k " plain"); w = median(k " watched")
        split(k, f, " ")
        printf "%-8s %5s %12.0f %12.0f %8.3f\n", f[1], f[2], p, w, (p > 0 ? w / p : 0)
    }
}' "$OUT/rows.txt" | tee "$OUT/table.txt"
