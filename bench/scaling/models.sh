#!/usr/bin/env bash
# models.sh — training images/s and peak memory against batch size: Darknet's AlexNet, VGG-16,
# Extraction (GoogLeNet-like), ResNet-50 and Darknet-53 cfgs in shoal (their own input sizes:
# 227, 256 cut to 224 by [crop], 224, 256, 256) beside torchvision's AlexNet, VGG-16, GoogLeNet
# and ResNet-50 (224) at the same batch and threads; batches double from 1 until memory would
# run out (a run's peak, scaled to the next batch, above MemAvailable) or a run fails.
#
#   bench/scaling/models.sh                                   # synthetic data, 2 threads
#   DATA=bench/out/scaling/jpegs BATCHES=32 bench/scaling/models.sh   # from JPEGs: data wait too
#   PAIRS="alexnet:alexnet" BATCHES="1 2" STEPS=1 bench/scaling/models.sh     # a quick check
#
# Settings: PAIRS (shoal cfg:torchvision model, "-" for none) default "alexnet:alexnet
# vgg-16:vgg16 extraction:googlenet resnet50:resnet50 darknet53:-", BATCHES="1 2 4 ... 256",
# THREADS=2 (kernel threads each), DATA=synthetic (or a JPEG folder: shoal --data DIR, torch
# DataLoader + ImageFolder), DATA_THREADS (shoal --data-threads and torch workers; default one
# per two threads), STEPS=5 (timed steps), REPS=1 (medians), ZOO=/usr/share/darknet/cfg (a
# name not there is read from bench/scaling/: alexnet-tv is torchvision's AlexNet as a cfg;
# NAME@S: that cfg at S x S, e.g. resnet50@224 at torchvision's size).
# Output: a table, bench/out/scaling/models-ips.svg and models-mem.svg (shoal plot).
set -euo pipefail
cd "$(dirname "$0")/../.."
PAIRS=${PAIRS:-"alexnet:alexnet vgg-16:vgg16 extraction:googlenet resnet50:resnet50 darknet53:-"}
BATCHES=${BATCHES:-"1 2 4 8 16 32 64 128 256"}
THREADS=${THREADS:-2}
DATA_THREADS=${DATA_THREADS:-$(( (THREADS + 1) / 2 ))}
DATA=${DATA:-synthetic}
STEPS=${STEPS:-5}
REPS=${REPS:-1}
BUILD=${BUILD:-build}
ZOO=${ZOO:-/usr/share/darknet/cfg}
OUT=bench/out/scaling
. bench/peers.sh # PY, and the peers' BLAS kernels (OPENBLAS_CORETYPE)
mkdir -p "$OUT"
rm -f "$OUT"/ips-*.jsonl "$OUT"/mem-*.jsonl
make -s -j2 BUILD="$BUILD" "$BUILD/shoal" >&2
SHOAL="$BUILD/shoal"

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
field() { $PY -c 'import json,sys
v="nan"
for l in sys.stdin:
    if l.startswith("{"):
        try: v=json.loads(l).get(sys.argv[1], "nan")
        except ValueError: pass
print(v)' "$1"; }
avail_mb() { awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo; }
fits() { # peak_mb at batch b, next batch n: 0 when the scaled peak stays under what is free
    awk -v p="$1" -v b="$2" -v n="$3" -v a="$(avail_mb)" 'BEGIN {exit !(p == "nan" || p * n / b < 0.9 * a)}'; }

shoal_run() { # cfg batch -> a JSON report in $OUT/shoal-cfg-batch.log
    local log="$OUT/shoal-$1-$2.log" name=${1%@*} f
    f="$ZOO/$name.cfg"
    [ -f "$f" ] || f="bench/scaling/$name.cfg" # alexnet-tv: torchvision's AlexNet layer for layer
    if [ "$name" != "$1" ]; then # resnet50@224: the cfg at torchvision's input size
        sed -e "s/^width=.*/width=${1##*@}/" -e "s/^height=.*/height=${1##*@}/" "$f" >"$OUT/$1.cfg"
        f="$OUT/$1.cfg"
    fi
    env -u OPENBLAS_CORETYPE "$SHOAL" train "$f" --data "$DATA" --batch "$2" --threads "$THREADS" \
        --data-threads "$DATA_THREADS" --max-steps "$STEPS" --json --profile --quiet >"$log" 2>&1 || true
    cat "$log"
}
torch_run() {
    local log="$OUT/torch-$1-$2.log" data=()
    [ "$DATA" != synthetic ] && data=(--data "$DATA" --workers "$DATA_THREADS")
    OMP_NUM_THREADS=$THREADS $PY bench/scaling/torch_train.py "$1" "$2" "$THREADS" "$STEPS" "${data[@]}" >"$log" 2>&1 || true
    cat "$log"
}

rows=()
for pair in $PAIRS; do
    cfg=${pair%%:*} tm=${pair##*:}
    : >"$OUT/ips-shoal-$cfg.jsonl"; : >"$OUT/mem-shoal-$cfg.jsonl"
    [ "$tm" != - ] && { : >"$OUT/ips-torch-$tm.jsonl"; : >"$OUT/mem-torch-$tm.jsonl"; }
    s_on=1 t_on=$([ "$tm" != - ] && echo 1 || echo 0) prev=0 s_mem=nan t_mem=nan
    for b in $BATCHES; do
        [ "$prev" -gt 0 ] && { fits "$s_mem" "$prev" "$b" || s_on=0; fits "$t_mem" "$prev" "$b" || t_on=0; }
        [ $s_on = 0 ] && [ $t_on = 0 ] && break
        si=(); sm=(); sw=(); ti=(); tmm=(); tw=()
        for r in $(seq "$REPS"); do
            if [ $s_on = 1 ]; then
                o=$(shoal_run "$cfg" "$b"); si+=("$(field images_per_s <<<"$o")"); sm+=("$(field peak_rss_mb <<<"$o")")
                sw+=("$(field data_wait_share <<<"$o")")
            fi
            if [ $t_on = 1 ]; then
                o=$(torch_run "$tm" "$b"); ti+=("$(field images_per_s <<<"$o")"); tmm+=("$(field peak_rss_mb <<<"$o")")
                tw+=("$(field data_wait_share <<<"$o")")
            fi
        done
        S=nan SM=nan SW=nan T=nan TM=nan TW=nan
        [ $s_on = 1 ] && { S=$(printf '%s\n' "${si[@]}" | median); SM=$(printf '%s\n' "${sm[@]}" | median); SW=$(printf '%s\n' "${sw[@]}" | median); }
        [ $t_on = 1 ] && { T=$(printf '%s\n' "${ti[@]}" | median); TM=$(printf '%s\n' "${tmm[@]}" | median); TW=$(printf '%s\n' "${tw[@]}" | median); }
        [ "$S" = nan ] && s_on=0
        [ "$T" = nan ] && t_on=0
        echo "  $cfg/$tm batch $b: shoal $S img/s $SM MB, torch $T img/s $TM MB" >&2
        rows+=("$cfg $b $S $SM $SW $tm $T $TM $TW")
        if [ "$S" != nan ]; then
            echo "{\"x\":$b,\"y\":$S,\"x_label\":\"batch\",\"y_label\":\"training images/s\",\"label\":\"shoal $cfg\"}" >>"$OUT/ips-shoal-$cfg.jsonl"
            echo "{\"x\":$b,\"y\":$SM,\"x_label\":\"batch\",\"y_label\":\"peak RSS (MB)\",\"label\":\"shoal $cfg\"}" >>"$OUT/mem-shoal-$cfg.jsonl"
            s_mem=$SM
        fi
        if [ "$T" != nan ]; then
            echo "{\"x\":$b,\"y\":$T,\"label\":\"torchvision $tm\"}" >>"$OUT/ips-torch-$tm.jsonl"
            echo "{\"x\":$b,\"y\":$TM,\"label\":\"torchvision $tm\"}" >>"$OUT/mem-torch-$tm.jsonl"
            t_mem=$TM
        fi
        prev=$b
    done
done

echo
echo "training images/s and peak RSS against batch, $THREADS threads, data $DATA ($DATA_THREADS decoding threads / workers); medians of $REPS runs of $STEPS steps"
printf '%-11s %5s %11s %9s %7s  %-10s %11s %9s %7s %8s %8s\n' shoal_cfg batch shoal_img/s shoal_MB wait% torchvision torch_img/s torch_MB wait% ips_x mem_x
for r in "${rows[@]}"; do
    set -- $r
    awk -v c="$1" -v b="$2" -v s="$3" -v sm="$4" -v sw="$5" -v tm="$6" -v t="$7" -v tmm="$8" -v tw="$9" 'BEGIN {
        printf "%-11s %5d %11s %9s %7s  %-10s %11s %9s %7s %8s %8s\n", c, b, s, sm, (sw == "nan") ? "-" : sprintf("%.1f", 100 * sw),
            tm, t, tmm, (tw == "nan") ? "-" : sprintf("%.1f", 100 * tw),
            (s != "nan" && t != "nan" && t > 0) ? sprintf("%.2f", s / t) : "-",
            (sm != "nan" && tmm != "nan" && tmm > 0) ? sprintf("%.2f", sm / tmm) : "-" }'
done
echo "(ips_x: shoal/torchvision images/s, > 1 shoal faster; mem_x: shoal/torchvision peak RSS, < 1 shoal smaller)"
ips=() mem=()
for f in "$OUT"/ips-*.jsonl; do [ -s "$f" ] && ips+=("$f"); done
for f in "$OUT"/mem-*.jsonl; do [ -s "$f" ] && mem+=("$f"); done
[ ${#ips[@]} -gt 0 ] && "$SHOAL" plot --bench "${ips[@]}" -o "$OUT/models-ips.svg" >&2
[ ${#mem[@]} -gt 0 ] && "$SHOAL" plot --bench "${mem[@]}" -o "$OUT/models-mem.svg" >&2
echo "plots: $OUT/models-ips.svg $OUT/models-mem.svg"
