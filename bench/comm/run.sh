#!/usr/bin/env bash
# run.sh — float32 sum allreduce: shoal against Open MPI's and MPICH's MPI_Allreduce and
# torch.distributed's gloo, side by side in one run, medians of REPS runs interleaved so
# machine noise hits all alike; 2 ranks, and 4 ranks on this 2-core machine
# (oversubscribed); allgather, broadcast and reduce_scatter against Open MPI; and the
# machine's memory bandwidth (bench/membw.c) beside the large-message figures.
#
#   bench/comm/run.sh          # REPS=3 RANKS="2 4" MIN=8 MAX=268435456 FACTOR=4
#                              # COLLS="allgather broadcast reduce_scatter" COLL_MAX=67108864
#
# Every figure is nccl-tests' busbw (algbw x the collective's bus factor) of the
# out-of-place operation, time = mean over the iterations of the slowest rank; the last
# size is MAX itself. Open MPI runs with mpirun's default binding (2 ranks) and
# --oversubscribe (4 ranks); MPICH with mpiexec's defaults; shoal under `shoal launch`.
# Results: bench/out/comm/ (raw JSON rows, table.txt) and the table on stdout;
# SUMMARY_ONLY=1 prints the table again from the last run's rows.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
RANKS=${RANKS:-"2 4"}
MIN=${MIN:-8}
MAX=${MAX:-268435456}
FACTOR=${FACTOR:-4}
COLLS=${COLLS-"allgather broadcast reduce_scatter"}
COLL_MAX=${COLL_MAX:-67108864}
SMALL_ITERS=${SMALL_ITERS:-300}
LARGE_ITERS=${LARGE_ITERS:-10}
BUILD=${BUILD:-build}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
OUT=bench/out/comm
mkdir -p "$OUT"
if [ "${SUMMARY_ONLY:-0}" = 1 ]; then # only the table again, from the last run's rows
    [ -s "$OUT/rows.jsonl" ] || { echo "run.sh: SUMMARY_ONLY=1 but no $OUT/rows.jsonl: run without it first" >&2; exit 2; }
else
rm -f "$OUT"/*.jsonl
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$BUILD/shoal"
cc -O2 -pthread bench/membw.c -o "$OUT/membw"
OMPI=""; MPICH=""
command -v mpicc.openmpi >/dev/null && mpicc.openmpi -O2 bench/comm/mpi_coll.c -o "$OUT/coll_openmpi" && OMPI="$OUT/coll_openmpi"
command -v mpicc.mpich >/dev/null && mpicc.mpich -O2 bench/comm/mpi_coll.c -o "$OUT/coll_mpich" && MPICH="$OUT/coll_mpich"
HAVE_TORCH=0; $PY -c "import torch.distributed" 2>/dev/null && HAVE_TORCH=1
SPLIT=1048576   # sizes up to here use SMALL_ITERS, above LARGE_ITERS

port() { echo $((30000 + RANDOM % 20000)); }
tag() { sed "s/^/{\"impl\": \"$1\", \"coll\": \"$2\", \"n\": $3, \"row\": /; s/\$/}/"; }

shoal_rows() { # coll n max -> json rows (out-of-place) on stdout
    local coll=$1 n=$2 max=$3 last_small=$MIN first_large=$MIN
    # MIN, MIN*FACTOR, ... split at SPLIT into a small and a large range (as the MPI and
    # gloo programs split their iteration counts)
    while [ "$first_large" -le "$SPLIT" ]; do last_small=$first_large; first_large=$((first_large * FACTOR)); done
    for range in "$MIN $last_small $SMALL_ITERS" "$first_large $max $LARGE_ITERS"; do
        set -- $range
        [ "$1" -gt "$max" ] && continue
        [ "$2" -gt "$max" ] && set -- "$1" "$max" "$3"
        SHOAL_MASTER_PORT=$(port) "$SHOAL" launch -n "$n" "$SHOAL" bench "$coll" -b "$1" -e "$2" -f "$FACTOR" \
            --iters "$3" -w $(( $3 / 10 + 1 )) -c 0 --json 2>/dev/null | sed 's/^\[rank 0\] //' |
            $PY -c 'import json,sys
d=json.loads(sys.stdin.read())
for r in d["rows"]: print(json.dumps({"size": r["size"], "time_us": r["time_us"], "busbw_gb_s": r["busbw_gb_s"]}))'
    done
}

ompi() { # n args...
    local n=$1 extra=""; shift
    [ "$n" -gt "$(nproc)" ] && extra="--oversubscribe"
    mpirun.openmpi --allow-run-as-root $extra -np "$n" "$OMPI" "$@" 2>/dev/null | grep '^{' || true
}

for rep in $(seq "$REPS"); do
    for n in $RANKS; do
        echo "rep $rep, $n ranks" >&2
        shoal_rows allreduce "$n" "$MAX" | tag shoal allreduce "$n" >>"$OUT/rows.jsonl" || echo "shoal allreduce failed" >&2
        [ -n "$OMPI" ] && ompi "$n" allreduce "$MIN" "$MAX" "$FACTOR" "$SMALL_ITERS" "$LARGE_ITERS" |
            tag openmpi allreduce "$n" >>"$OUT/rows.jsonl"
        if [ -n "$MPICH" ]; then
            mpiexec.mpich -n "$n" "$MPICH" allreduce "$MIN" "$MAX" "$FACTOR" "$SMALL_ITERS" "$LARGE_ITERS" 2>/dev/null |
                grep '^{' | tag mpich allreduce "$n" >>"$OUT/rows.jsonl" || true
        fi
        if [ "$HAVE_TORCH" = 1 ]; then
            $PY bench/comm/gloo_allreduce.py --nranks "$n" --min "$MIN" --max "$MAX" --factor "$FACTOR" \
                --small "$SMALL_ITERS" --large "$LARGE_ITERS" --port "$(port)" 2>/dev/null |
                grep '^{' | tag gloo allreduce "$n" >>"$OUT/rows.jsonl" || true
        fi
        for coll in $COLLS; do
            shoal_rows "$coll" "$n" "$COLL_MAX" | tag shoal "$coll" "$n" >>"$OUT/rows.jsonl" || echo "shoal $coll failed" >&2
            [ -n "$OMPI" ] && ompi "$n" "$coll" "$MIN" "$COLL_MAX" "$FACTOR" "$SMALL_ITERS" "$LARGE_ITERS" |
                tag openmpi "$coll" "$n" >>"$OUT/rows.jsonl"
        done
    done
done
"$OUT/membw" >"$OUT/membw.jsonl"
fi

$PY - "$OUT/rows.jsonl" "$OUT/membw.jsonl" "$REPS" <<'PY' | tee "$OUT/table.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
mem = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
reps = sys.argv[3]
med = {}
for r in rows:
    med.setdefault((r["impl"], r["coll"], r["n"], r["row"]["size"]), []).append(r["row"])
def get(impl, coll, n, size, field):
    v = med.get((impl, coll, n, size))
    return statistics.median(x[field] for x in v) if v else float("nan")
def ratio(a, b):
    return a / b if b == b and b > 0 and a == a else float("nan")
for coll in ["allreduce"] + sorted({r["coll"] for r in rows} - {"allreduce"}):
    impls = ["shoal", "openmpi", "mpich", "gloo"] if coll == "allreduce" else ["shoal", "openmpi"]
    for n in sorted({r["n"] for r in rows if r["coll"] == coll}):
        # sizes as shoal printed them (split collectives round to whole elements per rank)
        sizes = sorted({r["row"]["size"] for r in rows if r["n"] == n and r["coll"] == coll and r["impl"] == "shoal"})
        if not sizes:
            continue
        print(f"\n{coll} float32{' sum' if 'reduce' in coll else ''}, {n} ranks, busbw GB/s (median of {reps}); x peer = shoal / peer")
        print(f"{'size':>11} " + " ".join(f"{i:>8}" for i in impls) + " " + " ".join(f"{'x ' + i:>9}" for i in impls[1:]))
        for s in sizes:
            b = {i: get(i, coll, n, s, "busbw_gb_s") for i in impls}
            print(f"{s:>11} " + " ".join(f"{b[i]:8.3f}" for i in impls) + " " +
                  " ".join(f"{ratio(b['shoal'], b[i]):9.2f}" for i in impls[1:]))
        s0 = next((s for s in sizes if s > 0), sizes[0])  # 4 ranks round 8 B of a split collective to 0
        print(f"latency at {s0} B (us): " + ", ".join(f"{i} {get(i, coll, n, s0, 'time_us'):.2f}" for i in impls))
print()
for m in mem:
    print(f"memory bandwidth, {m['threads']} thread(s): memcpy {m['memcpy_gb_s']:.2f} GB/s, "
          f"non-temporal copy {m['nt_copy_gb_s']:.2f} GB/s (STREAM-style copy, read+write: {m['stream_copy_gb_s']:.2f} GB/s)")
PY
