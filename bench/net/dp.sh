#!/usr/bin/env bash
# dp.sh — data-parallel training across two hosts of the emulated cluster (2 hosts x RPH
# ranks, default 1): shoal against PyTorch DistributedDataParallel over gloo on the same
# network, side by side, medians of REPS runs interleaved.
#
#   bench/net/dp.sh      # REPS=3 RATES="10gbit 1gbit" MODELS="lenet mlp-wide" STEPS=100 WARMUP=10 RPH=1
#   BASE=/tmp/old/shoal bench/net/dp.sh   # also another shoal binary, interleaved (a before)
#   EXTRA=--sfb BASE=build/shoal bench/net/dp.sh   # flags for shoal's runs (BASE_EXTRA: the base's)
#
# As bench/dp/run.sh: weak scaling, 64 Fashion-MNIST images per rank per step, one thread
# per rank, SGD with momentum; aggregate images/s. shoal runs one `shoal train -n RPH
# --nnodes 2 --node-rank K` per host; PyTorch RPH bench/dp/torch_ddp.py --from-env per host.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
RATES=${RATES:-"10gbit 1gbit"}
MODELS=${MODELS:-"lenet mlp-wide"}
STEPS=${STEPS:-100}
WARMUP=${WARMUP:-10}
RPH=${RPH:-1}
BUILD=${BUILD:-build}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
OUT=${OUT:-bench/out/net}
export NETLAB_NAME=bdp
LAB=scripts/netlab.sh
mkdir -p "$OUT"
[ "$(id -u)" = 0 ] || { echo "dp.sh: the emulated cluster needs root (network namespaces)" >&2; exit 2; }
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL=$PWD/$BUILD/shoal
trap '$LAB down >/dev/null 2>&1 || true' EXIT
$LAB down >/dev/null 2>&1 || true
rm -f "$OUT/dp.jsonl"

json_field() { $PY -c 'import json,sys
for line in sys.stdin:
    line=line.strip()
    if line.startswith("[rank 0] "): line=line[9:]
    if line.startswith("{"):
        print(json.loads(line)[sys.argv[1]]); break' "$1"; }

shoal_run() { # model [binary [extra flags]] -> images/s
    local m=$1 SHOAL=${2:-$SHOAL} extra=${3-${EXTRA:-}} key p log="$OUT/dp-shoal-$1.log"
    key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n'); p=$((30000 + RANDOM % 20000))
    SHOAL_JOB_KEY=$key SHOAL_MASTER_PORT=$p OPENBLAS_NUM_THREADS=1 $LAB exec h1 "$SHOAL" train "examples/$m.cfg" \
        --data "$DATA" -n "$RPH" --nnodes 2 --node-rank 1 --master-addr "$($LAB addr h0)" --threads 1 \
        --max-steps $((STEPS + WARMUP)) $extra --quiet >/dev/null 2>&1 &
    SHOAL_JOB_KEY=$key SHOAL_MASTER_PORT=$p OPENBLAS_NUM_THREADS=1 $LAB exec h0 "$SHOAL" train "examples/$m.cfg" \
        --data "$DATA" -n "$RPH" --nnodes 2 --node-rank 0 --master-addr "$($LAB addr h0)" --threads 1 \
        --max-steps $((STEPS + WARMUP)) $extra --json --quiet >"$log" 2>&1 || { echo "shoal failed: $log" >&2; echo nan; wait; return; }
    wait
    json_field images_per_s <"$log"
}
torch_run() {
    local m=$1 log="$OUT/dp-torch-$1.log"
    OPENBLAS_NUM_THREADS=1 $LAB run "$RPH" --port $((30000 + RANDOM % 20000)) -- $PY bench/dp/torch_ddp.py --from-env \
        --model "$m" --steps "$STEPS" --warmup "$WARMUP" --data "$DATA" >"$log" 2>&1 || { echo "torch failed: $log" >&2; echo nan; return; }
    json_field images_per_s <"$log"
}

for rate in $RATES; do
    $LAB up 2 --rate "$rate" >/dev/null
    for rep in $(seq "$REPS"); do
        for m in $MODELS; do
            echo "rate $rate, $m, rep $rep" >&2
            b=null; [ -z "${BASE:-}" ] || b=$(shoal_run "$m" "$BASE" "${BASE_EXTRA:-}")
            s=$(shoal_run "$m"); t=$(torch_run "$m")
            echo "{\"rate\": \"$rate\", \"model\": \"$m\", \"shoal\": $s, \"torch\": $t, \"base\": $b}" >>"$OUT/dp.jsonl"
        done
    done
    $LAB down >/dev/null
done
$PY - "$OUT/dp.jsonl" "$REPS" "$RPH" "${EXTRA:-}" "${BASE_EXTRA:-}" <<'PY' | tee "$OUT/dp-table.txt"
import json, math, statistics, sys
rows = [json.loads(l.replace("nan", "NaN")) for l in open(sys.argv[1]) if l.strip()]
print(f"data-parallel training, 2 hosts x {sys.argv[3]} rank(s), images/s (median of {sys.argv[2]})"
      + (f"; shoal {sys.argv[4]}" if sys.argv[4] else "") + (f"; base {sys.argv[5]}" if sys.argv[5] else ""))
base = any(r.get("base") is not None for r in rows)
print(f"{'rate':>8} {'model':>10} {'shoal':>9} {'PyTorch':>9} {'x PyTorch':>10}" + (f" {'base':>9} {'x base':>7}" if base else ""))
for rate in dict.fromkeys(r["rate"] for r in rows):
    for m in dict.fromkeys(r["model"] for r in rows):
        sel = [r for r in rows if r["rate"] == rate and r["model"] == m]
        s = statistics.median(r["shoal"] for r in sel); t = statistics.median(r["torch"] for r in sel)
        line = f"{rate:>8} {m:>10} {s:9.0f} {t:9.0f} {s / t if t > 0 else math.nan:10.2f}"
        if base:
            b = statistics.median(r["base"] for r in sel)
            line += f" {b:9.0f} {s / b if b > 0 else math.nan:7.2f}"
        print(line)
PY
