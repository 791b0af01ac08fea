#!/usr/bin/env bash
# run.sh — float32 sum allreduce: shoal against Open MPI's and MPICH's MPI_Allreduce and
# torch.distributed's gloo, side by side in one run, medians of REPS runs interleaved so
# machine noise hits all alike; 2 ranks, and 4 ranks on this 2-core machine
# (oversubscribed); plus the machine's memory bandwidth beside the large-message figures.
#
#   bench/comm/run.sh                      # REPS=3 RANKS="2 4" MAX=268435456 FACTOR=4
#
# Every figure is nccl-tests' busbw (algbw x 2(n-1)/n) of the out-of-place allreduce,
# time = mean over the iterations of the slowest rank. Open MPI runs with mpirun's default
# binding (2 ranks) and --oversubscribe (4 ranks); MPICH with mpiexec's defaults.
# Results: bench/out/comm/ (raw JSON rows) and the table on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
RANKS=${RANKS:-"2 4"}
MIN=${MIN:-8}
MAX=${MAX:-268435456}
FACTOR=${FACTOR:-4}
SMALL_ITERS=${SMALL_ITERS:-300}
LARGE_ITERS=${LARGE_ITERS:-10}
BUILD=${BUILD:-build}
PY=/usr/bin/python3
OUT=bench/out/comm
mkdir -p "$OUT"
rm -f "$OUT"/*.jsonl
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$BUILD/shoal"
cc -O2 -pthread bench/membw.c -o "$OUT/membw"
OMPI=""; MPICH=""
command -v mpicc.openmpi >/dev/null && mpicc.openmpi -O2 bench/comm/mpi_allreduce.c -o "$OUT/ar_openmpi" && OMPI="$OUT/ar_openmpi"
command -v mpicc.mpich >/dev/null && mpicc.mpich -O2 bench/comm/mpi_allreduce.c -o "$OUT/ar_mpich" && MPICH="$OUT/ar_mpich"
HAVE_TORCH=0; $PY -c "import torch.distributed" 2>/dev/null && HAVE_TORCH=1
SPLIT=1048576   # sizes up to here use SMALL_ITERS, above LARGE_ITERS

port() { echo $((30000 + RANDOM % 20000)); }

# The sizes MIN, MIN*FACTOR, ... split at SPLIT into a small and a large range (as the MPI
# and gloo programs split their iteration counts).
last_small=$MIN; first_large=$MIN
while [ "$first_large" -le "$SPLIT" ]; do last_small=$first_large; first_large=$((first_large * FACTOR)); done

shoal_rows() { # n -> json rows (out-of-place) on stdout
    local n=$1
    for range in "$MIN $last_small $SMALL_ITERS" "$first_large $MAX $LARGE_ITERS"; do
        set -- $range
        [ "$1" -gt "$MAX" ] && continue
        [ "$2" -gt "$MAX" ] && set -- "$1" "$MAX" "$3"
        SHOAL_MASTER_PORT=$(port) "$SHOAL" launch -n "$n" "$SHOAL" bench allreduce -b "$1" -e "$2" -f "$FACTOR" \
            -n "$3" -w $(( $3 / 10 + 1 )) -c 0 --json 2>/dev/null | sed -n 's/^\[rank 0\] //p' |
            $PY -c 'import json,sys
d=json.loads(sys.stdin.read())
for r in d["rows"]: print(json.dumps({"size": r["size"], "time_us": r["time_us"], "busbw_gb_s": r["busbw_gb_s"]}))'
    done
}

for rep in $(seq "$REPS"); do
    for n in $RANKS; do
        echo "rep $rep, $n ranks" >&2
        shoal_rows "$n" | sed "s/^/{\"impl\": \"shoal\", \"n\": $n, \"row\": /; s/\$/}/" >>"$OUT/rows.jsonl"
        if [ -n "$OMPI" ]; then
            extra=""; [ "$n" -gt "$(nproc)" ] && extra="--oversubscribe"
            mpirun.openmpi --allow-run-as-root $extra -np "$n" "$OMPI" "$MIN" "$MAX" "$FACTOR" "$SMALL_ITERS" "$LARGE_ITERS" 2>/dev/null |
                grep '^{' | sed "s/^/{\"impl\": \"openmpi\", \"n\": $n, \"row\": /; s/\$/}/" >>"$OUT/rows.jsonl"
        fi
        if [ -n "$MPICH" ]; then
            mpiexec.mpich -n "$n" "$MPICH" "$MIN" "$MAX" "$FACTOR" "$SMALL_ITERS" "$LARGE_ITERS" 2>/dev/null |
                grep '^{' | sed "s/^/{\"impl\": \"mpich\", \"n\": $n, \"row\": /; s/\$/}/" >>"$OUT/rows.jsonl"
        fi
        if [ "$HAVE_TORCH" = 1 ]; then
            $PY bench/comm/gloo_allreduce.py --nranks "$n" --min "$MIN" --max "$MAX" --factor "$FACTOR" \
                --small "$SMALL_ITERS" --large "$LARGE_ITERS" --port "$(port)" 2>/dev/null |
                grep '^{' | sed "s/^/{\"impl\": \"gloo\", \"n\": $n, \"row\": /; s/\$/}/" >>"$OUT/rows.jsonl"
        fi
    done
done
"$OUT/membw" >"$OUT/membw.jsonl"

$PY - "$OUT/rows.jsonl" "$OUT/membw.jsonl" "$REPS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
mem = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
reps = sys.argv[3]
impls = ["shoal", "openmpi", "mpich", "gloo"]
med = {}
for r in rows:
    key = (r["impl"], r["n"], r["row"]["size"])
    med.setdefault(key, []).append(r["row"])
def get(impl, n, size, field):
    v = med.get((impl, n, size))
    return statistics.median(x[field] for x in v) if v else float("nan")
for n in sorted({r["n"] for r in rows}):
    sizes = sorted({r["row"]["size"] for r in rows if r["n"] == n})
    print(f"\nallreduce float32 sum, {n} ranks, busbw GB/s (median of {reps}); ratio = shoal / peer")
    print(f"{'size':>11} {'shoal':>8} {'openmpi':>8} {'mpich':>8} {'gloo':>8} {'x ompi':>7} {'x mpich':>7} {'x gloo':>7}")
    for s in sizes:
        b = {i: get(i, n, s, "busbw_gb_s") for i in impls}
        rat = lambda p: b["shoal"] / b[p] if b[p] == b[p] and b[p] > 0 else float("nan")
        print(f"{s:>11} {b['shoal']:8.3f} {b['openmpi']:8.3f} {b['mpich']:8.3f} {b['gloo']:8.3f} "
              f"{rat('openmpi'):7.2f} {rat('mpich'):7.2f} {rat('gloo'):7.2f}")
    s0 = sizes[0]
    t = {i: get(i, n, s0, "time_us") for i in impls}
    print(f"latency at {s0} B (us): " + ", ".join(f"{i} {t[i]:.2f}" for i in impls))
for m in mem:
    print(f"memory bandwidth, {m['threads']} thread(s): memcpy {m['memcpy_gb_s']:.2f} GB/s "
          f"(STREAM-style copy {m['stream_copy_gb_s']:.2f} GB/s)")
PY
