#!/usr/bin/env bash
# run.sh — communication-efficient training, shoal's --compress / --sfb settings against
# PyTorch DDP with its communication hooks (fp16_compress_hook, powerSGD_hook), side by side
# in one run (interleaved, medians of REPS runs): time per epoch, time to TARGET test
# accuracy, final accuracy, and bytes on the wire per step, measured next to the figure the
# algorithm's own count gives.
#
#   bench/compress/run.sh                        # one host, 2 ranks over shared memory
#   LAB=1 bench/compress/run.sh                  # emulated cluster: HOSTS=2 x 1 rank at RATE=1gbit
#   TINY=1 bench/compress/run.sh                 # a check that everything runs (seconds, not figures)
#
# Knobs: MODELS="lenet mlp-wide fc-heavy" SETTINGS="none fp16 bf16 1bit topk:0.01 lowrank:4 sfb
# sfb+1bit" HOOKS="none fp16 powersgd:4" EPOCHS=2 TARGET=0.85 REPS=1 RANKS=2 (one host)
# HOSTS=2 RPH=1 RATE=1gbit (LAB=1) THREADS=1 TRANSPORT= (one host: tcp puts shoal's bytes on
# lo, so they can be measured there) BUILD=build.
#
# Measured bytes: with LAB=1, what host h0's eth0 sent (ip -s link, the lab's own counter)
# divided by the steps; on one host, what lo sent divided by steps and ranks (PyTorch's gloo
# always; shoal only with TRANSPORT=tcp, shared memory is on no wire). Other traffic on lo
# counts too: on a busy machine take the LAB=1 figures. Time to TARGET is measured at epoch
# ends (both sides test after every epoch, the test time included).
set -euo pipefail
cd "$(dirname "$0")/../.."
TINY=${TINY:-0}
if [ "$TINY" = 1 ]; then
    : "${MODELS:=lenet}" "${SETTINGS:=none 1bit sfb}" "${HOOKS:=none fp16}" "${EPOCHS:=1}" "${MAX_STEPS:=8}"
fi
MODELS=${MODELS:-"lenet mlp-wide fc-heavy"}
SETTINGS=${SETTINGS:-"none fp16 bf16 1bit topk:0.01 lowrank:4 sfb sfb+1bit"}
HOOKS=${HOOKS-"none fp16 powersgd:4"}   # HOOKS= : no PyTorch run
EPOCHS=${EPOCHS:-2}
MAX_STEPS=${MAX_STEPS:-0}   # > 0: at most this many steps per epoch (tiny runs)
TARGET=${TARGET:-0.85}
REPS=${REPS:-1}
RANKS=${RANKS:-2}
LAB=${LAB:-0}
HOSTS=${HOSTS:-2}
RPH=${RPH:-1}
RATE=${RATE:-1gbit}
THREADS=${THREADS:-1}
TRANSPORT=${TRANSPORT:-}
BUILD=${BUILD:-build}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
NETLAB=scripts/netlab.sh
export NETLAB_NAME=${NETLAB_NAME:-cz} # a lab of its own: another one may be up beside it
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$PWD/$BUILD/shoal"
OUT=bench/out/compress
mkdir -p "$OUT"

lab_up_here=0
if [ "$LAB" = 1 ]; then
    if ! $NETLAB status >/dev/null 2>&1; then
        $NETLAB up "$HOSTS" --rate "$RATE" >&2
        lab_up_here=1
    fi
    trap '[ $lab_up_here = 1 ] && $NETLAB down >&2' EXIT
    NR=$((HOSTS * RPH))
    where="emulated cluster: $HOSTS hosts x $RPH rank(s) at $RATE"
else
    NR=$RANKS
    where="one host: $RANKS ranks${TRANSPORT:+ (SHOAL_TRANSPORT=$TRANSPORT)}"
fi

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# bytes sent so far: host h0's eth0 in the lab, lo here
tx_now() {
    if [ "$LAB" = 1 ]; then $NETLAB status | awk '$1=="h0" {for (i=1;i<=NF;i++) if ($i=="sent") {print $(i+1); exit}}'
    else awk -F'[: ]+' '$2=="lo" {print $11; exit}' /proc/net/dev; fi
}
# per-host share of the lab counter or per-rank share of lo
tx_div() { if [ "$LAB" = 1 ]; then echo 1; else echo "$NR"; fi; }

# shoal: one setting -> "epoch_s to_target_s accuracy measured_B theory_B"
shoal_run() {
    local m=$1 s=$2 log="$OUT/shoal-$1-${2//[:+]/_}.log" flags=()
    case $s in
        sfb) flags=(--sfb) ;;
        sfb+*) flags=(--sfb --compress "${s#sfb+}") ;;
        *) flags=(--compress "$s") ;;
    esac
    local steps=()
    [ "$MAX_STEPS" -gt 0 ] && steps=(--max-steps $((MAX_STEPS * EPOCHS)))
    local t0 t1
    t0=$(tx_now)
    if [ "$LAB" = 1 ]; then
        OPENBLAS_NUM_THREADS=1 $NETLAB run "$RPH" --port $((29500 + RANDOM % 400)) -- "$SHOAL" train "examples/$m.cfg" \
            --data "$DATA" --epochs "$EPOCHS" "${steps[@]}" --threads "$THREADS" "${flags[@]}" --json >"$log" 2>&1 || true
    else
        SHOAL_TRANSPORT=${TRANSPORT:-auto} OPENBLAS_NUM_THREADS=1 "$SHOAL" train "examples/$m.cfg" --data "$DATA" -n "$NR" \
            --epochs "$EPOCHS" "${steps[@]}" --threads "$THREADS" "${flags[@]}" --json >"$log" 2>&1 || true
    fi
    t1=$(tx_now)
    $PY - "$log" "$TARGET" "$t0" "$t1" "$(tx_div)" "$NR" <<'PYEOF'
import json, re, sys
log, target, t0, t1, div, nr = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
rep, hit, nparams = None, "nan", None
for line in open(log, errors="replace"):
    line = re.sub(r"^\[rank \d+[^\]]*\] ", "", line.strip())
    p = re.search(r", (\d+) parameters$", line)
    if p: nparams = int(p.group(1))
    m = re.search(r"test accuracy ([0-9.]+)%.*\(([0-9.]+) s\)", line)
    if m and hit == "nan" and float(m.group(1)) / 100 >= target: hit = m.group(2)
    if line.startswith("{"):
        try: rep = json.loads(line)
        except ValueError: pass
if not rep:
    print("nan nan nan nan nan"); sys.exit()
if hit == "nan" and rep["accuracy"] >= target: hit = "%.1f" % rep["seconds"]
epochs = max(rep["epochs"], 1e-9)
theory = rep.get("bytes_sent_per_step")
if theory is None and nparams:  # float32 ring allreduce: 2 (n-1)/n of the gradients
    theory = 2.0 * (nr - 1) / nr * 4 * nparams
print("%.2f %s %.4f %.0f %s" % (rep["seconds"] / max(round(epochs), 1) if epochs >= 1 else rep["seconds"], hit,
      rep["accuracy"], (t1 - t0) / max(rep["steps"], 1) / div, "%.0f" % theory if theory is not None else "nan"))
PYEOF
}

torch_run() {
    local m=$1 h=$2 log="$OUT/torch-$1-${2//[:+]/_}.log" steps=()
    [ "$MAX_STEPS" -gt 0 ] && steps=(--max-steps "$MAX_STEPS")
    if [ "$LAB" = 1 ]; then
        OPENBLAS_NUM_THREADS=1 $NETLAB run "$RPH" --port $((29500 + RANDOM % 400)) -- $PY bench/compress/torch_hooks.py \
            --model "$m" --hook "$h" --epochs "$EPOCHS" "${steps[@]}" --threads "$THREADS" --data "$DATA" >"$log" 2>&1 || true
    else
        OPENBLAS_NUM_THREADS=1 $PY bench/compress/torch_hooks.py --model "$m" --hook "$h" --nranks "$NR" --epochs "$EPOCHS" \
            "${steps[@]}" --threads "$THREADS" --data "$DATA" --port $((29600 + RANDOM % 300)) >"$log" 2>&1 || true
    fi
    $PY - "$log" "$TARGET" "$(tx_div)" <<'PYEOF'
import json, sys
log, target, div = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
eps = []
for line in open(log, errors="replace"):
    line = line.strip()
    if line.startswith("{"):
        try: eps.append(json.loads(line))
        except ValueError: pass
if not eps:
    print("nan nan nan nan nan"); sys.exit()
last = eps[-1]
hit = next(("%.1f" % e["seconds"] for e in eps if e["accuracy"] >= target), "nan")
print("%.2f %s %.4f %.0f %.0f" % (last["seconds"] / len(eps), hit, last["accuracy"],
      last["tx_bytes"] / max(last["steps"], 1) / div, last["theory_bytes_per_step"]))
PYEOF
}

declare -A R
for m in $MODELS; do
    for rep in $(seq "$REPS"); do
        for s in $SETTINGS; do
            R[$m,shoal,$s,$rep]=$(shoal_run "$m" "$s")
            echo "  $m shoal $s rep $rep: ${R[$m,shoal,$s,$rep]}" >&2
        done
        for h in $HOOKS; do
            R[$m,torch,$h,$rep]=$(torch_run "$m" "$h")
            echo "  $m torch $h rep $rep: ${R[$m,torch,$h,$rep]}" >&2
        done
    done
done

col() { # model peer setting column -> median over reps
    for rep in $(seq "$REPS"); do echo "${R[$1,$2,$3,$rep]:-nan nan nan nan nan}" | awk -v c="$4" '{print $c}'; done | { grep -v nan || true; } | median
}

echo
cap=; [ "$MAX_STEPS" -gt 0 ] && cap=" (at most $MAX_STEPS steps each)"
echo "communication-efficient training, $where; $EPOCHS epoch(s)$cap, batch 64 per rank,"
echo "$THREADS thread(s) per rank; medians of $REPS run(s); time to $TARGET test accuracy at epoch ends (nan: not reached)"
printf '%-9s %-6s %-12s %9s %11s %9s %13s %13s %11s\n' model peer setting epoch_s to_target_s accuracy \
    bytes/step_meas bytes/step_theo vs_none_epoch
for m in $MODELS; do
    base=$(col "$m" shoal none 1)
    tbase=$(col "$m" torch none 1)
    for s in $SETTINGS; do
        printf '%-9s %-6s %-12s %9s %11s %9s %13s %13s %11s\n' "$m" shoal "$s" "$(col "$m" shoal "$s" 1)" \
            "$(col "$m" shoal "$s" 2)" "$(col "$m" shoal "$s" 3)" "$(col "$m" shoal "$s" 4)" "$(col "$m" shoal "$s" 5)" \
            "$(awk -v a="$base" -v b="$(col "$m" shoal "$s" 1)" 'BEGIN { if (a == "nan" || b == "nan" || b == 0) print "nan"; else printf "%.2fx", a/b }')"
    done
    for h in $HOOKS; do
        printf '%-9s %-6s %-12s %9s %11s %9s %13s %13s %11s\n' "$m" torch "$h" "$(col "$m" torch "$h" 1)" \
            "$(col "$m" torch "$h" 2)" "$(col "$m" torch "$h" 3)" "$(col "$m" torch "$h" 4)" "$(col "$m" torch "$h" 5)" \
            "$(awk -v a="$tbase" -v b="$(col "$m" torch "$h" 1)" 'BEGIN { if (a == "nan" || b == "nan" || b == 0) print "nan"; else printf "%.2fx", a/b }')"
    done
done

# The issue's two targets, from the medians above.
echo
for m in $MODELS; do
    best_s=nan; best_t=nan; bs=; bt=
    for s in $SETTINGS; do v=$(col "$m" shoal "$s" 2); [ "$v" != nan ] && { [ "$best_s" = nan ] || awk -v a="$v" -v b="$best_s" 'BEGIN{exit !(a<b)}'; } && best_s=$v bs=$s; done
    for h in $HOOKS; do v=$(col "$m" torch "$h" 2); [ "$v" != nan ] && { [ "$best_t" = nan ] || awk -v a="$v" -v b="$best_t" 'BEGIN{exit !(a<b)}'; } && best_t=$v bt=$h; done
    awk -v m="$m" -v a="$best_s" -v b="$best_t" -v bs="$bs" -v bt="$bt" -v tg="$TARGET" 'BEGIN {
        if (a == "nan" || b == "nan") printf "%s: time to %s: shoal best %s (%s), torch best %s (%s): not both reached\n", m, tg, a, bs, b, bt;
        else printf "%s: time to %s: shoal best %.1f s (%s), torch best %.1f s (%s): %.2fx (target >= 2)\n", m, tg, a, bs, b, bt, b/a }'
done
if [[ " $MODELS " == *" mlp-wide "* && " $SETTINGS " == *" 1bit "* && " $SETTINGS " == *" none "* ]]; then
    awk -v a="$(col mlp-wide shoal none 1)" -v b="$(col mlp-wide shoal 1bit 1)" 'BEGIN {
        if (a != "nan" && b != "nan" && b > 0) printf "mlp-wide: 1bit per epoch %.2fx faster than none (target >= 5 on the 1gbit lab)\n", a/b }'
fi
echo "logs: $OUT/"
