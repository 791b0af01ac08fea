#!/usr/bin/env bash
# run.sh — model parallelism against one rank, one kernel thread per rank: a 2-stage
# pipeline on 2 ranks (images/s, and each stage's measured bubble, its idle share of the
# pass, against the 1F1B schedule's (S-1)/(M+S-1), for several micro-batch counts M; also
# with SHOAL_PIPE_DEFER=0, whose weight gradients leave the schedule's bubble idle), and
# --tensor-parallel 2 on TP_MODEL (images/s, peak RSS per rank), and --hybrid on HY_MODEL
# (an AlexNet-like net whose connected layers hold most weights) on HY_RANKS ranks: each
# scheme beside data parallelism with the same global batch (--scaling strong), images/s and
# the bytes a rank sends per step (data parallelism: 2(N-1)/N of the gradients). Beside them,
# PyTorch where it offers the same (TORCH=1, bench/mp/torch_mp.py): the pipeline beside
# torch.distributed.pipeline.sync.Pipe (one process, 2 threads: the cores shoal's 2 ranks use),
# the tensor-parallel run beside Megatron-style tensor parallelism wired by hand over gloo
# (2 processes of one thread). The peers know balanced.cfg and mlp-wide.cfg only.
#
#   bench/mp/run.sh            # REPS=3 STEPS=60 MICRO="1 2 4 8" MODEL=bench/mp/balanced.cfg
#                              # TP_MODEL=examples/mlp-wide.cfg TP_STEPS=30
#                              # HY_MODEL=bench/mp/fc4096.cfg HY_RANKS=2 HY_STEPS=20
#                              # HY_BATCH=64 HY_SCHEMES="broadcast vertical horizontal" TORCH=1
#   REPS=1 STEPS=6 TP_STEPS=3 HY_STEPS=3 MICRO="2" bench/mp/run.sh  # a quick check that it runs
#   ONLY=hybrid bench/mp/run.sh                                     # the hybrid table alone
#   ONLY=pipeline bench/mp/run.sh                                   # the pipeline table alone
#   LAB=1 bench/mp/run.sh     # the hybrid table on the emulated cluster: HOSTS=2 x RPH=1 rank
#                             # at RATE=1gbit (scripts/netlab.sh; the lab is its own, "mp")
#
# Runs are interleaved within each repetition so machine noise hits them alike; medians.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
STEPS=${STEPS:-60}
MICRO=${MICRO:-"1 2 4 8"}
MODEL=${MODEL:-bench/mp/balanced.cfg}
TP_MODEL=${TP_MODEL:-examples/mlp-wide.cfg}
TP_STEPS=${TP_STEPS:-30}
HY_MODEL=${HY_MODEL:-bench/mp/fc4096.cfg}
HY_RANKS=${HY_RANKS:-2}
HY_STEPS=${HY_STEPS:-20}
HY_BATCH=${HY_BATCH:-64}
HY_SCHEMES=${HY_SCHEMES:-"broadcast vertical horizontal"}
ONLY=${ONLY:-all}
LAB=${LAB:-0}
TORCH=${TORCH:-1}
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
HOSTS=${HOSTS:-2}
RPH=${RPH:-1}
RATE=${RATE:-1gbit}
BUILD=${BUILD:-build}
DATA=${SHOAL_DATA_DIR:-/usr/share/datasets/fashion-mnist}
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
OUT=bench/out/mp
mkdir -p "$OUT"
S=2
where="on one host"
if [ "$LAB" = 1 ]; then # only the hybrid table runs across the lab's hosts
    ONLY=hybrid
    HY_RANKS=$((HOSTS * RPH))
    export NETLAB_NAME=${NETLAB_NAME:-mp}
    lab_up_here=0
    if ! scripts/netlab.sh status >/dev/null 2>&1; then
        scripts/netlab.sh up "$HOSTS" --rate "$RATE" >&2
        lab_up_here=1
    fi
    trap '[ $lab_up_here = 1 ] && scripts/netlab.sh down >&2' EXIT
    where="on the emulated cluster, $HOSTS hosts x $RPH rank(s) at $RATE"
fi
# one hybrid-table run: its ranks under -n here, or one per lab host slot
hy_train() {
    if [ "$LAB" = 1 ]; then
        OPENBLAS_NUM_THREADS=1 scripts/netlab.sh run "$RPH" --port $((29500 + RANDOM % 400)) -- \
            "$PWD/$BUILD/shoal" train "$@"
    else
        OPENBLAS_NUM_THREADS=1 "$BUILD/shoal" train "$@" -n "$HY_RANKS"
    fi
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
ips_of() { grep -o '"images_per_s":[0-9.]*' "$1" | head -1 | cut -d: -f2; }
rss_of() { grep -o '"peak_rss_mb":[0-9.]*' "$1" | head -1 | cut -d: -f2; }
# the mean over stages of the measured bubble share
bubble_of() { grep -o '"bubble_share":[0-9.]*' "$1" | cut -d: -f2 | awk '{s+=$1; n++} END {printf "%.4f", n ? s/n : 0}'; }

common=(--data "$DATA" --threads 1 --max-steps "$STEPS" --json --quiet)
declare -A IPS BUB RSS SENT
[ "$TORCH" = 1 ] && ! "$PY" -c 'import torch' 2>/dev/null && { echo "python3-torch missing: no PyTorch rows (scripts/deps.sh)" >&2; TORCH=0; }
torch_ips() { grep -o '"images_per_s": [0-9.]*' "$1" | head -1 | awk '{print $2}'; }
# data parallelism's payload from its --profile line "(X MB)": a ring sends 2(N-1)/N of it
dp_sent_of() { grep -o 'allreduce in flight [0-9.]* ms per step ([0-9.]* MB)' "$1" | grep -o '([0-9.]*' | tr -d '(' |
               awk -v n="$HY_RANKS" '{printf "%.0f", $1 * 1e6 * 2 * (n - 1) / n}'; }
sent_of() { grep -o '"bytes_sent_per_step":[0-9.]*' "$1" | head -1 | cut -d: -f2; }
hybrid_reps() {
    local r=$1 hy=(--data "$DATA" --threads 1 --max-steps "$HY_STEPS" --batch "$HY_BATCH" --json)
    local log="$OUT/hy-dp.log"
    hy_train "$HY_MODEL" "${hy[@]}" --scaling strong --profile >"$log" 2>&1 || { echo "failed: $log" >&2; tail -3 "$log" >&2; exit 1; }
    IPS[hydp]+="$(ips_of "$log") "; SENT[hydp]+="$(dp_sent_of "$log") "
    echo "  rep $r: $(basename "$HY_MODEL") data parallel $(ips_of "$log") img/s" >&2
    for sc in $HY_SCHEMES; do
        log="$OUT/hy-$sc.log"
        hy_train "$HY_MODEL" "${hy[@]}" --hybrid "$sc" >"$log" 2>&1 || { echo "failed: $log" >&2; tail -3 "$log" >&2; exit 1; }
        IPS[hy$sc]+="$(ips_of "$log") "; SENT[hy$sc]+="$(sent_of "$log") "
        echo "  rep $r: hybrid $sc $(ips_of "$log") img/s, $(sent_of "$log") bytes sent per step" >&2
    done
}
hybrid_table() {
    echo
    echo "$(basename "$HY_MODEL"), global batch $HY_BATCH on $HY_RANKS ranks $where, 1 thread per rank, medians of $REPS runs of $HY_STEPS steps"
    printf "%-22s %12s %26s\n" "layout" "images/s" "MB sent per rank and step"
    for k in dp $HY_SCHEMES; do
        local ips sent name
        ips=$(echo ${IPS[hy$k]} | tr ' ' '\n' | median)
        sent=$(echo ${SENT[hy$k]} | tr ' ' '\n' | median)
        name=$([ "$k" = dp ] && echo "data parallel" || echo "hybrid $k")
        printf "%-22s %12.0f %26.2f\n" "$name" "$ips" "$(awk -v x="$sent" 'BEGIN {print x / 1e6}')"
    done
}
if [ "$ONLY" = hybrid ]; then
    for r in $(seq "$REPS"); do hybrid_reps "$r"; done
    hybrid_table
    exit 0
fi
for r in $(seq "$REPS"); do
    log="$OUT/one.log"
    OPENBLAS_NUM_THREADS=1 "$BUILD/shoal" train "$MODEL" "${common[@]}" >"$log" 2>&1 || { echo "failed: $log" >&2; tail -3 "$log" >&2; exit 1; }
    IPS[one]+="$(ips_of "$log") "
    echo "  rep $r: one rank $(ips_of "$log") img/s" >&2
    for m in $MICRO; do
        log="$OUT/pipe-m$m.log"
        OPENBLAS_NUM_THREADS=1 "$BUILD/shoal" train "$MODEL" "${common[@]}" -n $S --pipeline $S \
            --micro-batches "$m" --profile >"$log" 2>&1 || { echo "failed: $log" >&2; tail -3 "$log" >&2; exit 1; }
        IPS[$m]+="$(ips_of "$log") "
        BUB[$m]+="$(bubble_of "$log") "
        echo "  rep $r: pipeline M=$m $(ips_of "$log") img/s, bubble $(bubble_of "$log")" >&2
        log="$OUT/pipe-nodefer-m$m.log" # the schedule's own bubble: weight gradients not deferred
        SHOAL_PIPE_DEFER=0 OPENBLAS_NUM_THREADS=1 "$BUILD/shoal" train "$MODEL" "${common[@]}" -n $S --pipeline $S \
            --micro-batches "$m" --profile >"$log" 2>&1 || { echo "failed: $log" >&2; tail -3 "$log" >&2; exit 1; }
        IPS[nd$m]+="$(ips_of "$log") "
        BUB[nd$m]+="$(bubble_of "$log") "
        echo "  rep $r: pipeline M=$m SHOAL_PIPE_DEFER=0 $(ips_of "$log") img/s, bubble $(bubble_of "$log")" >&2
        if [ "$TORCH" = 1 ]; then
            log="$OUT/torch-pipe-m$m.log"
            "$PY" bench/mp/torch_mp.py --mode pipe --model "$(basename "$MODEL" .cfg)" --threads $S --chunks "$m" \
                --batch 128 --steps "$STEPS" >"$log" 2>&1 || { echo "failed: $log" >&2; tail -3 "$log" >&2; exit 1; }
            IPS[tpipe$m]+="$(torch_ips "$log") "
            echo "  rep $r: PyTorch Pipe chunks=$m $(torch_ips "$log") img/s" >&2
        fi
    done
    [ "$ONLY" = pipeline ] && continue
    tp=(--data "$DATA" --threads 1 --max-steps "$TP_STEPS" --json --quiet)
    log="$OUT/tp-one.log"
    OPENBLAS_NUM_THREADS=1 "$BUILD/shoal" train "$TP_MODEL" "${tp[@]}" >"$log" 2>&1 || { echo "failed: $log" >&2; tail -3 "$log" >&2; exit 1; }
    IPS[tp1]+="$(ips_of "$log") "; RSS[tp1]+="$(rss_of "$log") "
    log="$OUT/tp-2.log"
    OPENBLAS_NUM_THREADS=1 "$BUILD/shoal" train "$TP_MODEL" "${tp[@]}" -n 2 --tensor-parallel 2 >"$log" 2>&1 || { echo "failed: $log" >&2; tail -3 "$log" >&2; exit 1; }
    IPS[tp2]+="$(ips_of "$log") "; RSS[tp2]+="$(rss_of "$log") "
    echo "  rep $r: $(basename "$TP_MODEL") one rank $(ips_of "$OUT/tp-one.log") img/s, tensor-parallel 2 $(ips_of "$log") img/s" >&2
    if [ "$TORCH" = 1 ]; then
        log="$OUT/torch-tp.log"
        "$PY" bench/mp/torch_mp.py --mode tp --model "$(basename "$TP_MODEL" .cfg)" --nranks 2 --batch 64 \
            --steps "$TP_STEPS" >"$log" 2>&1 || { echo "failed: $log" >&2; tail -3 "$log" >&2; exit 1; }
        IPS[ttp]+="$(torch_ips "$log") "
        echo "  rep $r: PyTorch tensor parallel (gloo) $(torch_ips "$log") img/s" >&2
    fi
    hybrid_reps "$r"
done

one=$(echo ${IPS[one]} | tr ' ' '\n' | median)
echo
echo "$(basename "$MODEL"), $S stages on $S ranks vs one rank, 1 thread per rank, medians of $REPS runs of $STEPS steps"
echo "(bubble: each stage's idle share of the pass, mean of the stages; \"not deferred\": SHOAL_PIPE_DEFER=0, weight"
echo " gradients in each micro-batch's backward, the 1F1B schedule's own bubble; by default they fill idle time)"
printf "%-10s %12s %10s %16s %16s %16s %16s\n" "layout" "images/s" "vs 1 rank" "bubble measured" "not deferred" \
    "(S-1)/(M+S-1)" "img/s not def."
printf "%-10s %12.0f %10s %16s %16s %16s %16s\n" "1 rank" "$one" "1.00x" "-" "-" "-" "-"
pct() { awk -v x="$1" 'BEGIN {print 100 * x}'; }
for m in $MICRO; do
    ips=$(echo ${IPS[$m]} | tr ' ' '\n' | median)
    bub=$(echo ${BUB[$m]} | tr ' ' '\n' | median)
    ndips=$(echo ${IPS[nd$m]} | tr ' ' '\n' | median)
    ndbub=$(echo ${BUB[nd$m]} | tr ' ' '\n' | median)
    theory=$(awk -v s=$S -v m="$m" 'BEGIN {printf "%.4f", (s - 1) / (m + s - 1)}')
    printf "%-10s %12.0f %9.2fx %15.1f%% %15.1f%% %15.1f%% %16.0f\n" "M=$m" "$ips" \
        "$(awk -v a="$ips" -v b="$one" 'BEGIN {print (b > 0 ? a / b : 0)}')" "$(pct "$bub")" "$(pct "$ndbub")" \
        "$(pct "$theory")" "$ndips"
done
if [ "$TORCH" = 1 ]; then
    echo
    echo "the same pipeline beside PyTorch's Pipe (one process, $S threads), same batch and micro-batches"
    printf "%-10s %12s %16s %10s\n" "M" "shoal" "PyTorch Pipe" "ratio"
    for m in $MICRO; do
        ips=$(echo ${IPS[$m]} | tr ' ' '\n' | median)
        tp=$(echo ${IPS[tpipe$m]} | tr ' ' '\n' | median)
        printf "%-10s %12.0f %16.0f %9.2fx\n" "M=$m" "$ips" "$tp" "$(awk -v a="$ips" -v b="$tp" 'BEGIN {print (b > 0 ? a / b : 0)}')"
    done
fi

[ "$ONLY" = pipeline ] && exit 0
tp1=$(echo ${IPS[tp1]} | tr ' ' '\n' | median)
tp2=$(echo ${IPS[tp2]} | tr ' ' '\n' | median)
echo
echo "$(basename "$TP_MODEL"), --tensor-parallel 2 on 2 ranks vs one rank, 1 thread per rank, medians of $REPS runs of $TP_STEPS steps"
printf "%-22s %12s %10s %22s\n" "layout" "images/s" "vs 1 rank" "peak RSS per rank (MB)"
printf "%-22s %12.0f %10s %22s\n" "1 rank" "$tp1" "1.00x" "$(echo ${RSS[tp1]} | tr ' ' '\n' | median)"
printf "%-22s %12.0f %9.2fx %22s\n" "tensor-parallel 2" "$tp2" "$(awk -v a="$tp2" -v b="$tp1" 'BEGIN {print (b > 0 ? a / b : 0)}')" \
    "$(echo ${RSS[tp2]} | tr ' ' '\n' | median)"
if [ "$TORCH" = 1 ]; then
    ttp=$(echo ${IPS[ttp]} | tr ' ' '\n' | median)
    printf "%-22s %12.0f %10s   shoal's tensor-parallel 2 is %.2fx it\n" "PyTorch TP (gloo) 2" "$ttp" "" \
        "$(awk -v a="$tp2" -v b="$ttp" 'BEGIN {print (b > 0 ? a / b : 0)}')"
fi
hybrid_table
