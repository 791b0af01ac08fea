#!/usr/bin/env bash
# run.sh — collectives across hosts of the emulated cluster (scripts/netlab.sh): shoal
# against Open MPI (tcp btl) and torch.distributed's gloo on the same network, side by side
# in one run, medians of REPS runs interleaved so machine noise hits all alike.
#
#   bench/net/run.sh     # REPS=3 RATES="1gbit 10gbit none" HOSTS="2 4" RPH="1 2"
#                        # MIN=8 MAX=16777216 FACTOR=4
#                        # COLLS="broadcast allgather reduce_scatter" COLL_RATES="1gbit none"
#                        # COLL_HOSTS=2 COLL_MIN=65536 PEERS=1
#
# PEERS=0 leaves Open MPI and gloo out (shoal alone, e.g. the link % at 10 gbit).
# For each rate and host count it brings a lab up (NETLAB_NAME=bnet), runs every
# implementation with RPH ranks per host, and takes the lab down. shoal runs as on real
# machines: one `shoal launch --nnodes H --node-rank K -n RPH` per host, node 0's address as
# the master. Open MPI through `netlab.sh mpirun` (its ssh replaced by the lab's agent,
# --mca btl tcp,self,vader), gloo through `netlab.sh run` with torchrun's variables.
#
# Figures: nccl-tests' algbw (size / time, time = mean over the iterations of the slowest
# rank) of the out-of-place operation (gloo: in place), and for shaped links the share of
# the link's limit that algbw reaches. The limit: every host has one link of rate L each way;
# whatever the algorithm, an allreduce of S bytes over h hosts must move at least
# 2(h-1)/h x S bytes through each host's link in each direction (a reduce-scatter and an
# allgather among the hosts; the ranks inside a host combine over shared memory), so
#   allreduce:                 limit algbw = L x h / (2(h-1))
#   allgather, reduce_scatter: limit algbw = L x h / (h-1)      (S is the whole buffer)
#   broadcast:                 limit algbw = L
# "link %" = algbw / limit. A flat ring over R ranks per host reaches at most
# (hR)/(2(hR-1)) x L: two thirds of the limit at 2 hosts x 2 ranks.
# SECURE="0 1" runs shoal twice, plain and with SHOAL_SECURE=1 (sealed links, impl
# "shoal-secure"; "secure %" = its algbw / plain shoal's: the mode's cost), SECURE=1 sealed
# only (default 0: plain only).
# BASE=path/to/an/older/shoal runs that binary too, beside this tree's (column "base",
# "x base" = shoal / base): a before and after in one sitting.
# Results: bench/out/net/rows.jsonl and table.txt; SUMMARY_ONLY=1 prints the table again.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
RATES=${RATES:-"1gbit 10gbit none"}
HOSTS=${HOSTS:-"2 4"}
RPH=${RPH:-"1 2"}
MIN=${MIN:-8}
MAX=${MAX:-16777216}
FACTOR=${FACTOR:-4}
COLLS=${COLLS-"broadcast allgather reduce_scatter"}
COLL_RATES=${COLL_RATES-"1gbit none"}
COLL_HOSTS=${COLL_HOSTS-2}
COLL_MIN=${COLL_MIN:-65536}
SMALL_ITERS=${SMALL_ITERS:-200}
LARGE_ITERS=${LARGE_ITERS:-8}
BUILD=${BUILD:-build}
SECURE=${SECURE:-0}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
OUT=${OUT:-bench/out/net}
export NETLAB_NAME=${NETLAB_NAME:-bnet}
LAB=scripts/netlab.sh
mkdir -p "$OUT"

if [ "${SUMMARY_ONLY:-0}" != 1 ]; then
[ "$(id -u)" = 0 ] || { echo "run.sh: the emulated cluster needs root (network namespaces)" >&2; exit 2; }
rm -f "$OUT/rows.jsonl"
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL=$PWD/$BUILD/shoal
BASE=${BASE:-}
[ -z "$BASE" ] || [ -x "$BASE" ] || { echo "run.sh: BASE=$BASE is not an executable shoal binary" >&2; exit 2; }
OMPI=""
[ "${PEERS:-1}" = 0 ] || { command -v mpicc.openmpi >/dev/null && mpicc.openmpi -O2 bench/comm/mpi_coll.c -o "$OUT/coll_openmpi" && OMPI=$(cd "$OUT" && pwd)/coll_openmpi; }
HAVE_TORCH=0; [ "${PEERS:-1}" = 0 ] || { $PY -c "import torch.distributed" 2>/dev/null && HAVE_TORCH=1; }
[ -n "$OMPI" ] || [ "${PEERS:-1}" = 0 ] || echo "run.sh: no mpicc.openmpi (apt-get install libopenmpi-dev): Open MPI left out" >&2
[ "$HAVE_TORCH" = 1 ] || [ "${PEERS:-1}" = 0 ] || echo "run.sh: no torch for $PY (scripts/deps.sh --bench): gloo left out" >&2
SPLIT=1048576   # sizes up to here use SMALL_ITERS, above LARGE_ITERS
trap '$LAB down >/dev/null 2>&1 || true' EXIT
$LAB down >/dev/null 2>&1 || true

port() { echo $((30000 + RANDOM % 20000)); }
tag() { # impl coll rate hosts rph
    sed "s/^/{\"impl\": \"$1\", \"coll\": \"$2\", \"rate\": \"$3\", \"hosts\": $4, \"rph\": $5, \"row\": /; s/\$/}/"; }

# shoal: one launcher per host, as on machines; rank 0's JSON rows. BIN: another binary,
# SEC: SHOAL_SECURE (0 plain, 1 sealed).
shoal_rows() { # coll hosts rph min max
    local coll=$1 h=$2 r=$3 lo=$4 hi=$5 last_small=$4 first_large=$4 p m key k bin=${BIN:-$SHOAL} sec=${SEC:-0}
    while [ "$first_large" -le "$SPLIT" ]; do last_small=$first_large; first_large=$((first_large * FACTOR)); done
    m=$($LAB addr h0)
    for range in "$lo $last_small $SMALL_ITERS" "$first_large $hi $LARGE_ITERS"; do
        set -- $range
        [ "$1" -gt "$hi" ] && continue
        [ "$2" -gt "$hi" ] && set -- "$1" "$hi" "$3"
        p=$(port); key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
        for ((k = 1; k < h; k++)); do
            SHOAL_SECURE=$sec SHOAL_JOB_KEY=$key SHOAL_MASTER_PORT=$p $LAB exec h$k "$bin" launch -n "$r" --nnodes "$h" --node-rank $k \
                --master-addr "$m" -- "$bin" bench "$coll" -b "$1" -e "$2" -f "$FACTOR" -n "$3" -w $(( $3 / 10 + 1 )) \
                -c 0 >/dev/null 2>&1 &
        done
        SHOAL_SECURE=$sec SHOAL_JOB_KEY=$key SHOAL_MASTER_PORT=$p $LAB exec h0 "$bin" launch -n "$r" --nnodes "$h" --node-rank 0 \
            --master-addr "$m" -- "$bin" bench "$coll" -b "$1" -e "$2" -f "$FACTOR" -n "$3" -w $(( $3 / 10 + 1 )) \
            -c 0 --json 2>/dev/null | sed -n 's/^\[rank 0\] //p' |
            $PY -c 'import json,sys
d=json.loads(sys.stdin.read())
for r in d["rows"]: print(json.dumps({"size": r["size"], "time_us": r["time_us"], "algbw_gb_s": r["algbw_gb_s"]}))' ||
            echo "run.sh: shoal $coll failed ($h hosts x $r)" >&2
        wait
    done
}

ompi_rows() { # coll hosts rph min max
    local hosts="" k
    for ((k = 0; k < $2; k++)); do hosts+="${hosts:+,}h$k:$3"; done
    $LAB mpirun --oversubscribe --host "$hosts" -np $(($2 * $3)) "$OMPI" "$1" "$4" "$5" "$FACTOR" "$SMALL_ITERS" \
        "$LARGE_ITERS" 2>/dev/null | grep '^{' |
        $PY -c 'import json,sys
for l in sys.stdin:
    r=json.loads(l); print(json.dumps({"size": r["size"], "time_us": r["time_us"], "algbw_gb_s": r["size"] / r["time_us"] / 1e3}))' ||
        echo "run.sh: Open MPI $1 failed ($2 hosts x $3)" >&2
}

gloo_rows() { # hosts rph min max
    $LAB run "$2" --port "$(port)" -- $PY bench/comm/gloo_allreduce.py --from-env --min "$3" --max "$4" \
        --factor "$FACTOR" --small "$SMALL_ITERS" --large "$LARGE_ITERS" 2>/dev/null | grep '^{' |
        $PY -c 'import json,sys
for l in sys.stdin:
    r=json.loads(l); print(json.dumps({"size": r["size"], "time_us": r["time_us"], "algbw_gb_s": r["size"] / r["time_us"] / 1e3}))' ||
        echo "run.sh: gloo failed ($1 hosts x $2)" >&2
}

for rate in $RATES; do
    for h in $HOSTS; do
        $LAB up "$h" --rate "$rate" >/dev/null
        for rep in $(seq "$REPS"); do
            for r in $RPH; do
                echo "rate $rate, $h hosts x $r, rep $rep" >&2
                # with BASE, the two shoal binaries take turns at going first (the first run after
                # the lab comes up or after the peers' runs was seen slower, whichever binary it was)
                for impl in $( [ -z "$BASE" ] && echo shoal || { [ $((rep % 2)) = 1 ] && echo shoal base || echo base shoal; }); do
                    for sec in $SECURE; do # sealed and plain alternate first too
                        name=$impl; [ "$sec" = 1 ] && name=$impl-secure
                        [ "$impl" = base ] && [ "$sec" = 1 ] && continue
                        SEC=$sec BIN=$( [ "$impl" = base ] && echo "$BASE" || echo "$SHOAL") shoal_rows allreduce "$h" "$r" "$MIN" "$MAX" |
                            tag "$name" allreduce "$rate" "$h" "$r" >>"$OUT/rows.jsonl"
                    done
                done
                [ -n "$OMPI" ] && ompi_rows allreduce "$h" "$r" "$MIN" "$MAX" | tag openmpi allreduce "$rate" "$h" "$r" >>"$OUT/rows.jsonl"
                [ "$HAVE_TORCH" = 1 ] && gloo_rows "$h" "$r" "$MIN" "$MAX" | tag gloo allreduce "$rate" "$h" "$r" >>"$OUT/rows.jsonl"
                case " $COLL_RATES " in *" $rate "*) ;; *) continue ;; esac
                case " $COLL_HOSTS " in *" $h "*) ;; *) continue ;; esac
                for coll in $COLLS; do
                    for sec in $SECURE; do
                        name=shoal; [ "$sec" = 1 ] && name=shoal-secure
                        SEC=$sec shoal_rows "$coll" "$h" "$r" "$COLL_MIN" "$MAX" | tag $name "$coll" "$rate" "$h" "$r" >>"$OUT/rows.jsonl"
                    done
                    [ -n "$OMPI" ] && ompi_rows "$coll" "$h" "$r" "$COLL_MIN" "$MAX" | tag openmpi "$coll" "$rate" "$h" "$r" >>"$OUT/rows.jsonl"
                done
            done
        done
        $LAB down >/dev/null
    done
done
fi

$PY - "$OUT/rows.jsonl" "$REPS" <<'PY' | tee "$OUT/table.txt"
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
reps = sys.argv[2]
med = {}
for r in rows:
    med.setdefault((r["impl"], r["coll"], r["rate"], r["hosts"], r["rph"], r["row"]["size"]), []).append(r["row"])
def get(impl, k, size, field):
    v = med.get((impl,) + k + (size,))
    return statistics.median(x[field] for x in v) if v else float("nan")
def rate_gb_s(rate):  # tc's syntax -> GB/s (decimal)
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
    return float(m.group(1)) * {"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1.0}[m.group(2)] / 8 if m else None
def limit(coll, rate, h):
    L = rate_gb_s(rate)
    if L is None: return None
    return {"allreduce": L * h / (2 * (h - 1)), "broadcast": L}.get(coll, L * h / (h - 1))
def fmt(x, w=8, p=3):
    return f"{x:{w}.{p}f}" if x == x else f"{'-':>{w}}"
keys = sorted({(r["coll"], r["rate"], r["hosts"], r["rph"]) for r in rows},
              key=lambda k: (k[0] != "allreduce", k[0], ["1gbit", "10gbit", "none"].index(k[1]) if k[1] in ["1gbit", "10gbit", "none"] else 9, k[2], k[3]))
for coll, rate, h, rph in keys:
    k = (coll, rate, h, rph)
    impls = [i for i in ["shoal", "shoal-secure", "base", "openmpi", "gloo"] if any((i,) + k == kk[:5] for kk in med)]
    first = impls[0] if impls else "shoal"
    sizes = sorted({kk[5] for kk in med if kk[:5] == (first,) + k})
    if not sizes: continue
    lim = limit(coll, rate, h)
    print(f"\n{coll} float32, rate {rate}, {h} hosts x {rph} ranks: algbw GB/s (median of {reps})"
          + (f"; link limit {lim:.3f} GB/s" if lim else "") + "; x peer = shoal / peer")
    peers = [i for i in impls[1:] if i != "shoal-secure"]
    both = "shoal" in impls and "shoal-secure" in impls
    print(f"{'size':>10} " + " ".join(f"{i:>8}" for i in impls) + (f" {'link %':>7}" if lim else "") + (f" {'base %':>7}" if lim and "base" in impls else "")
          + (f" {'secure %':>8}" if both else "")
          + (" " + " ".join(f"{'x ' + i:>10}" for i in peers) if peers else ""))
    for s in sizes:
        b = {i: get(i, k, s, "algbw_gb_s") for i in impls}
        line = f"{s:>10} " + " ".join(fmt(b[i]) for i in impls)
        if lim: line += f" {100 * b[first] / lim:7.0f}"
        if lim and "base" in impls: line += f" {100 * b['base'] / lim:7.0f}"
        if both: line += f" {100 * b['shoal-secure'] / b['shoal'] if b['shoal'] > 0 else float('nan'):8.0f}"
        line += "".join(f" {fmt(b[first] / b[i] if b[i] > 0 else float('nan'), 10, 2)}" for i in peers)
        print(line)
    if both:  # the mode's cost where it matters: the sizes that fill the link (1 MiB and up)
        big = [s for s in sizes if s >= 1 << 20] or sizes
        mean = lambda i: statistics.mean(get(i, k, s, "algbw_gb_s") for s in big)
        print(f"from {big[0]} B: mean algbw shoal {mean('shoal'):.3f}, shoal-secure {mean('shoal-secure'):.3f} GB/s "
              f"(sealed {100 * mean('shoal-secure') / mean('shoal'):.1f}% of plain)")
    s0 = sizes[0]
    print(f"latency at {s0} B (us): " + ", ".join(f"{i} {get(i, k, s0, 'time_us'):.1f}" for i in impls))
PY
