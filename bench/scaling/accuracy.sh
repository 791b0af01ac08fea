#!/usr/bin/env bash
# accuracy.sh — accuracy while scaling, pictures against IDX files: Fashion-MNIST written out
# as PNG class folders (fashion_png.py), LeNet (examples/lenet.cfg with flip=0 and a warm-up,
# burn_in) trained EPOCHS epochs on each of RANKS ranks, weak scaling (64 pictures a rank a
# step, so the global batch grows with the ranks) with --lr-scaling linear; the same runs on
# the IDX files, and on the PNGs through a list file in the IDX files' order (the same
# sequence: equal to IDX to the bit, which isolates what the folder's order changes); mean
# test accuracy over SEEDS. The issue's bound: PNG folders and IDX within 0.3 points on 1 and
# 2 ranks.
#
#   bench/scaling/accuracy.sh                                   # 2 epochs on 1, 2 and 4 ranks
#   NTRAIN=2000 NTEST=500 EPOCHS=1 RANKS="1 2" SEEDS=1 BURN_IN=10 bench/scaling/accuracy.sh  # check
#
# Settings: EPOCHS=2, RANKS="1 2 4", SEEDS="1 2 3", BURN_IN=100 (warm-up steps), THREADS=1,
# FASHION=/usr/share/datasets/fashion-mnist, PNGS=bench/out/scaling/fashion-png (written once;
# NTRAIN / NTEST: only the first pictures, for a check).
# Output: a table and bench/out/scaling/accuracy.svg (test accuracy against epoch of every run,
# shoal plot RUN.json...).
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCHS=${EPOCHS:-2}
RANKS=${RANKS:-"1 2 4"}
BURN_IN=${BURN_IN:-100}
THREADS=${THREADS:-1}
SEEDS=${SEEDS:-"1 2 3"}
FASHION=${FASHION:-/usr/share/datasets/fashion-mnist}
BUILD=${BUILD:-build}
OUT=bench/out/scaling
PNGS=${PNGS:-$OUT/fashion-png${NTRAIN:+-$NTRAIN}}
. bench/peers.sh # PY
mkdir -p "$OUT"
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$BUILD/shoal"
[ -d "$PNGS" ] || $PY bench/scaling/fashion_png.py "$PNGS" "$FASHION" ${NTRAIN:-} ${NTEST:-} >&2
IDX=$FASHION
if [ -n "${NTRAIN:-}" ]; then # the same first pictures as IDX files
    IDX=$OUT/fashion-idx-$NTRAIN
    mkdir -p "$IDX"
    $PY - "$FASHION" "$IDX" "$NTRAIN" "${NTEST:-10000}" <<'PY'
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], {"train": int(sys.argv[3]), "t10k": int(sys.argv[4])}
for p in ("train", "t10k"):
    for kind, per in (("images-idx3", 784), ("labels-idx1", 1)):
        raw = gzip.open(f"{src}/{p}-{kind}-ubyte.gz").read()
        dims = raw[3]
        head = bytearray(raw[:4 + 4 * dims])
        struct.pack_into(">I", head, 4, n[p])
        open(f"{dst}/{p}-{kind}-ubyte", "wb").write(bytes(head) + raw[4 + 4 * dims:4 + 4 * dims + n[p] * per])
PY
fi
CFG=$OUT/lenet-pictures.cfg
sed -e 's/^channels=1/channels=1\nflip=0/' -e "s/^policy=steps/burn_in=$BURN_IN\npolicy=steps/" examples/lenet.cfg >"$CFG"

field() { $PY -c 'import json,sys
v="nan"
for l in sys.stdin:
    l=l.strip()
    if l.startswith("[rank 0] "): l=l[9:]
    if l.startswith("{"):
        try: v=json.loads(l).get(sys.argv[1], "nan")
        except ValueError: pass
print(v)' "$1"; }
run() { # data ranks tag seed [test data] -> accuracy; the report in $OUT/acc-TAG-RANKS-SEED.json
    local np=() td=() json="$OUT/acc-$3-$2-$4.json"
    [ "$2" -gt 1 ] && np=(-n "$2" --lr-scaling linear)
    [ -n "${5:-}" ] && td=(--test-data "$5")
    env -u OPENBLAS_CORETYPE "$SHOAL" train "$CFG" --data "$1" "${td[@]}" "${np[@]}" --epochs "$EPOCHS" \
        --threads "$THREADS" --seed "$4" --json --quiet 2>"$OUT/acc-$3-$2-$4.log" | sed 's/^\[rank 0\] //' >"$json" || true
    field accuracy <"$json"
}
mean() { awk '{ if ($1 == "nan") bad = 1; s += $1; n++ } END { print (bad || !n) ? "nan" : s / n }'; }

declare -A P I L
runs=()
for n in $RANKS; do
    p=() i=() l=()
    for seed in $SEEDS; do
        p+=("$(run "$PNGS" "$n" png "$seed")")
        i+=("$(run "$IDX" "$n" idx "$seed")")
        l+=("$(run "$PNGS-train.txt" "$n" list "$seed" "$PNGS-val.txt")")
        echo "  $n rank(s), seed $seed: PNG folders ${p[-1]}, IDX ${i[-1]}, PNG list in IDX order ${l[-1]}" >&2
    done
    P[$n]=$(printf '%s\n' "${p[@]}" | mean)
    I[$n]=$(printf '%s\n' "${i[@]}" | mean)
    L[$n]=$(printf '%s\n' "${l[@]}" | mean)
    first=${SEEDS%% *}
    runs+=("$OUT/acc-png-$n-$first.json" "$OUT/acc-idx-$n-$first.json")
done
echo
echo "Fashion-MNIST, LeNet, $EPOCHS epochs, weak scaling 64 a rank, --lr-scaling linear, burn_in $BURN_IN; mean of seeds $SEEDS"
printf '%5s %12s %12s %12s %12s %14s\n' ranks global_batch png_acc% idx_acc% png-idx 'list_acc%'
for n in $RANKS; do
    awk -v n="$n" -v p="${P[$n]}" -v i="${I[$n]}" -v l="${L[$n]}" 'BEGIN {
        if (p == "nan" || i == "nan") { printf "%5d %12d %12s %12s %12s %14s\n", n, 64 * n, p, i, "-", l; exit }
        printf "%5d %12d %12.2f %12.2f %+12.2f %14.2f\n", n, 64 * n, 100 * p, 100 * i, 100 * (p - i), 100 * l }'
done
echo "(the issue's bound: |png - idx| <= 0.30 points on 1 and 2 ranks; the list in the IDX files' order equals idx)"
"$SHOAL" plot "${runs[@]}" --x epoch -o "$OUT/accuracy.svg" >&2 || true
echo "plot: $OUT/accuracy.svg"
