#!/usr/bin/env bash
# pipe_ab.sh — a 2-stage pipeline on 2 ranks, two sides (two binaries, or one binary under two
# environments) side by side in one sitting, beside one rank: images/s per micro-batch count M,
# medians of REPS rounds, and in how many rounds B beat A. One thread per rank.
#
#   BASE=/path/to/main/shoal bench/mp/pipe_ab.sh        # A: BASE, B: this tree's build
#   A_ENV="SHOAL_PIPE_PACK=1" B_ENV="SHOAL_PIPE_PACK=0" bench/mp/pipe_ab.sh   # one binary
#   REPS=5 STEPS=60 MICRO="1 2 4 8" MODEL=bench/mp/balanced.cfg (the defaults)
#
# Each round runs one rank, then A and B at each M, so the machine's slow and fast stretches
# hit both alike; every run takes /tmp/shoal-bench.lock (the machine is shared).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
NEW="$BUILD/shoal"
make -s -j2 BUILD="$BUILD" "$NEW" >&2
REPS=${REPS:-5} STEPS=${STEPS:-60} MICRO=${MICRO:-"1 2 4 8"} MODEL=${MODEL:-bench/mp/balanced.cfg}
BASE=${BASE:-$NEW}
A_ENV=${A_ENV:-}
B_ENV=${B_ENV:-}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
LOCK=${LOCK:-/tmp/shoal-bench.lock}
OUT=bench/out/mp
mkdir -p "$OUT"
runs="$OUT/pipe_ab.txt"
: >"$runs"
# images/s of one run: BIN ENV... then train's arguments
ips() {
    local bin=$1 envs=$2
    shift 2
    # shellcheck disable=SC2086 # ENV is a list of NAME=VALUE words
    flock "$LOCK" env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS=1 $envs "$bin" train "$MODEL" --data "$DATA" \
        --threads 1 --max-steps "$STEPS" --json --quiet "$@" 2>&1 | grep -o '"images_per_s":[0-9.]*' | cut -d: -f2
}
for r in $(seq "$REPS"); do
    echo "one 0 $(ips "$NEW" "$B_ENV")" >>"$runs"
    for m in $MICRO; do
        echo "A $m $(ips "$BASE" "$A_ENV" -n 2 --pipeline 2 --micro-batches "$m")" >>"$runs"
        echo "B $m $(ips "$NEW" "$B_ENV" -n 2 --pipeline 2 --micro-batches "$m")" >>"$runs"
    done
    echo "  round $r of $REPS done" >&2
done
echo "$(basename "$MODEL"), 2 stages on 2 ranks, $STEPS steps, medians of $REPS rounds (runs: $runs)"
echo "A: $BASE $A_ENV"
echo "B: $NEW $B_ENV"
awk -v micro="$MICRO" '
function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ v[$1, $2] = v[$1, $2] " " $3; if ($1 == "A") a[$2, ++na[$2]] = $3; if ($1 == "B") b[$2, ++nb[$2]] = $3 }
END {
    one = median(v["one", 0])
    printf "one rank %.0f images/s\n%-4s %10s %10s %8s %8s %12s\n", one, "M", "A", "B", "A/one", "B/one", "B ahead in"
    nm = split(micro, mm, " ")
    for (k = 1; k <= nm; k++) {
        m = mm[k]
        wins = 0
        for (i = 1; i <= nb[m]; i++) wins += b[m, i] + 0 > a[m, i] + 0
        ma = median(v["A", m]); mb = median(v["B", m])
        printf "%-4s %10.0f %10.0f %8.2f %8.2f %7d of %d\n", m, ma, mb, ma / one, mb / one, wins, nb[m]
    }
}' "$runs"
